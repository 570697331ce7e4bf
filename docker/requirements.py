"""Print the pinned requirements of pyproject.toml for the image: the core dependencies plus the extras named
on the command line. The image installs them in a layer of its own, before the code is copied, so a rebuild
after a code change reuses it (Airflow and PySpark are not installed again)."""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[2:]:
    requirements += project["optional-dependencies"][extra]
print("\n".join(requirements))
