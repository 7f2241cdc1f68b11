"""A real OpenSSH server (Debian's openssh-server) on a loopback port, started as a plain process with
a host key and a user key generated for it, for the SSH tier: tokentop run over a real `ssh -t`.

    with Sshd(tmp_path) as sshd:                      # started; stopped on leaving
        cmd = sshd.ssh(port, "cd /repo && tokentop")  # the ssh command line, to a port (a proxy's)
        sshd.port                                      # where sshd itself listens

It runs as whoever runs the tests (as root it needs /run/sshd, made here); its keys, config and log
are under the folder it is given. `missing()` says why it cannot run here, or None.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

from benchmarks.common.deadline import Deadline

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def missing() -> str | None:
    """Why the SSH tier cannot run here, or None."""
    if not os.path.exists(SSHD):
        return "needs Debian's openssh-server (make sshd installs it where apt-get and root are at hand)"
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "needs the OpenSSH client (ssh, ssh-keygen): make sshd installs it"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.port = free_port()
        self.user = getpass.getuser()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Sshd:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Sshd:
        f = self.folder
        f.mkdir(parents=True, exist_ok=True)
        for name in ("host_key", "user_key"):
            if not (f / name).exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(f / name)], check=True)
        shutil.copy(f / "user_key.pub", f / "authorized_keys")
        os.chmod(f / "authorized_keys", 0o600)
        (f / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {f / 'host_key'}",
                    f"AuthorizedKeysFile {f / 'authorized_keys'}",
                    f"PidFile {f / 'sshd.pid'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",  # the keys live in a test folder, not ~/.ssh
                    "UsePAM no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "X11Forwarding no",
                    "LogLevel ERROR",
                ]
            )
            + "\n"
        )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation folder
        log = open(f / "sshd.log", "ab")  # noqa: SIM115  # kept open for the server's life
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(f / "sshd_config")], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = Deadline(10)
        while not deadline.passed():
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {(f / 'sshd.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port} in {deadline}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def ssh(self, port: int, command: str, tty: bool = True) -> list[str]:
        """The ssh command line that runs `command` over a connection to `port` on this machine
        (sshd's own, or a proxy's in front of it)."""
        f = self.folder
        return [
            "ssh",
            *(["-t"] if tty else []),
            "-p",
            str(port),
            "-i",
            str(f / "user_key"),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"UserKnownHostsFile={f / 'known_hosts'}",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            f"{self.user}@127.0.0.1",
            command,
        ]

    def shell_line(self, port: int, command: str) -> str:
        return shlex.join(self.ssh(port, command))
