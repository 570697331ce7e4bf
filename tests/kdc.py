"""A real MIT Kerberos KDC for tests (Debian's krb5-kdc): a realm of its own in a temporary directory, principals
with keytabs made by ``kadmin.local``, ``krb5kdc`` in the foreground on a free loopback port, stopped by pid.
``env`` is what a process needs to use the realm (``KRB5_CONFIG``, no replay cache on disk); ``kinit`` gets a
client's ticket cache from its keytab."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from support import free_port, wait_for_port

REALM = "LOGBUS.TEST"


class Kdc:
    def __init__(self, workdir: Path, realm: str = REALM):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.realm = realm
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.krb5_conf = self.dir / "krb5.conf"
        self.kdc_conf = self.dir / "kdc.conf"
        self.krb5_conf.write_text(
            f"[libdefaults]\n default_realm = {realm}\n dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " dns_canonicalize_hostname = false\n rdns = false\n udp_preference_limit = 1\n"
            " ticket_lifetime = 1h\n forwardable = false\n"
            f"[realms]\n {realm} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
            f"[domain_realm]\n 127.0.0.1 = {realm}\n localhost = {realm}\n")
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n kdc_ports = {self.port}\n kdc_tcp_ports = {self.port}\n"
            f"[realms]\n {realm} = {{\n  database_name = {self.dir / 'principal'}\n"
            f"  key_stash_file = {self.dir / 'stash'}\n  acl_file = {self.dir / 'kadm5.acl'}\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n }\n"
            f"[logging]\n kdc = FILE:{self.dir / 'kdc.log'}\n")
        (self.dir / "kadm5.acl").write_text("")
        self.env = {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf),
                    "KRB5RCACHETYPE": "none", "KRB5_TRACE": str(self.dir / "trace.log")}
        self.env.pop("KRB5CCNAME", None)

    def _run(self, *args: str) -> str:
        out = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {out.stdout}{out.stderr}")
        return out.stdout

    def start(self) -> "Kdc":
        self._run("/usr/sbin/kdb5_util", "create", "-s", "-r", self.realm, "-P", "kdc-master-password")
        self.proc = subprocess.Popen(["/usr/sbin/krb5kdc", "-n", "-r", self.realm], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=open(self.dir / "krb5kdc.out", "wb"),
                                     start_new_session=True)
        wait_for_port("127.0.0.1", self.port, proc=self.proc)
        return self

    def principal(self, name: str) -> Path:
        """Add ``name`` (``alice``, ``kafka/127.0.0.1``) with a random key; its keytab."""
        keytab = self.dir / (name.replace("/", "_") + ".keytab")
        self._run("/usr/sbin/kadmin.local", "-r", self.realm, "-q", f"addprinc -randkey {name}@{self.realm}")
        self._run("/usr/sbin/kadmin.local", "-r", self.realm, "-q", f"ktadd -k {keytab} {name}@{self.realm}")
        return keytab

    def kinit(self, name: str, keytab: Path) -> dict:
        """A ticket cache for ``name`` from its keytab: the environment of a process that uses it."""
        cache = self.dir / (name.replace("/", "_") + ".ccache")
        env = {**self.env, "KRB5CCNAME": f"FILE:{cache}"}
        out = subprocess.run(["kinit", "-k", "-t", str(keytab), f"{name}@{self.realm}"], env=env,
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(f"kinit {name}: {out.stderr}")
        return env

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
