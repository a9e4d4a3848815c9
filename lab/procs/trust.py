"""Users and trusted files: the user the servers run as (nobody when the lab is root), the
files and folders the lab reads only when they are the user's own, and the one-line
warning for what it leaves alone. Standard library only, like lab.procs."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from lab.procs import alive as alive
from lab.procs import proc_state as proc_state

UNPRIVILEGED = ("nobody", "nogroup")


def warn(line: str) -> None:
    """One line on stderr (the lab's one-line rule, for things it leaves alone)."""
    sys.stderr.write("locklab: " + " ".join(line.split()) + "\n")
    sys.stderr.flush()


def server_ids() -> tuple[int, int]:
    """(uid, gid) the servers run as: ``nobody`` when the lab is root, else the lab's own."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    import grp
    import pwd

    return pwd.getpwnam(UNPRIVILEGED[0]).pw_uid, grp.getgrnam(UNPRIVILEGED[1]).gr_gid


def as_server_user(cmd: list[str]) -> list[str]:
    """`cmd` run as the unprivileged server user when the lab is root (via setpriv)."""
    if os.geteuid() != 0:
        return cmd
    user, group = UNPRIVILEGED
    return ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups", *cmd]


def distrust(path: Path, *, directory: bool, private: bool) -> str | None:
    """Why `path` cannot be trusted as the lab user's own file or folder (None: it can)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if directory and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not {os.geteuid()}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"has mode {mode:o} (others may write it)"
    if private and mode & 0o077:
        return f"has mode {mode:o} (others may read it; private is {700 if directory else 600})"
    return None


def read_trusted_json(path: Path, *, private: bool = False) -> dict[str, Any] | None:
    """The JSON object in `path` when it passes `distrust` (opened without following a
    symlink, checked again on the open file); None when absent or untrusted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        mask = 0o077 if private else 0o022
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & mask:
            return None
        try:
            data = json.loads(f.read())
        except (ValueError, OSError):
            return None
    return data if isinstance(data, dict) else None


def write_private_json(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """Write atomically (temp file and rename in the same folder), never through a link."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):  # left by a process of this PID that died
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def private_dir(create: bool = True) -> Path | None:
    """The lab user's private folder for state kept between commands (kept servers):
    ``<tmp>/locklab-state-<uid>``, 0700, owned by the user. Checked on every call; a folder
    that fails a check is named in one line and left alone (None)."""
    path = Path(tempfile.gettempdir()) / f"locklab-state-{os.geteuid()}"
    if create and not os.path.lexists(path):
        with contextlib.suppress(FileExistsError):  # someone made it meanwhile: check it
            os.mkdir(path, 0o700)
    if distrust(path, directory=True, private=False) is None:
        _close(path)  # the user's own, nobody else may write it: only maybe too open
    why = distrust(path, directory=True, private=True)
    if why == "does not exist":
        return None
    if why is not None:
        warn(f"{path} {why}; not using it, left alone")
        return None
    return path


def _close(folder: Path) -> None:
    """Make the user's own folder 0700 (through a descriptor that does not follow a
    link), rather than refuse it on every command for being readable by others."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
                os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
