"""``logbus load``'s one-line failure message (logbus.loads.failure_line)."""

import pytest

from logbus.loads import failure_line

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_the_innermost_java_cause_is_the_line():
    text = ("An error occurred while calling o97.parquet.\n: org.apache.spark.SparkException: Job aborted.\n"
            "\tat org.apache.spark.Foo(Foo.scala:1)\nCaused by: org.apache.spark.SparkException: Task failed\n"
            "\tat x\nCaused by: java.io.IOException: No space left on device\n\tat y\n")
    assert failure_line(RuntimeError(text)) == "java.io.IOException: No space left on device"


def test_a_python_error_is_named_with_its_type_on_one_line():
    assert failure_line(OSError(28, "No space left on device")) == "OSError: [Errno 28] No space left on device"
    assert failure_line(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert failure_line(KeyError()) == "KeyError"
    assert len(failure_line(RuntimeError("x" * 2000))) == 400


def test_a_py4j_error_without_a_cause_names_its_java_exception():
    text = "An error occurred while calling o97.load.\n: java.lang.IllegalStateException: no such table\n\tat x\n"
    assert failure_line(RuntimeError(text)) == "java.lang.IllegalStateException: no such table"

    class Unprintable(Exception):
        def __str__(self):
            raise ConnectionError("the JVM is gone")

    assert failure_line(Unprintable()) == "Unprintable"
