"""initdb once: a cluster's fresh data folder, kept as a template and copied for the next.

initdb takes about a second of a 2-core machine (1.0-1.5 s measured), on every command
that starts its own PostgreSQL: `locklab run`, every verify, the tests. What it writes
depends only on the binaries, initdb's arguments and the settings the lab appends, so the
first cluster's folder is copied, before its server ever starts, into the user's cache
(``$XDG_CACHE_HOME/locklab/pgdata`` or ``~/.cache/locklab/pgdata``), keyed by those. The
next command copies it out (about 0.25 s for 38 MB) and sets its own superuser password
in single-user mode (40 ms): a template never holds a password any server accepts.

The cache is trusted only when its folders are the lab user's own and private (mode 0700);
anything else, or any error reading or writing it, falls back to initdb. Remove the folder
to drop it; a template of binaries that changed is never used again (the key has their
size and mtime).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from lab.procs.trust import distrust, read_trusted_json, server_ids, write_private_json

MARKER = "locklab-template.json"  # written last: a folder without it is incomplete


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "locklab" / "pgdata"


def template_key(bindir: Path, version: str, args: list[str], settings: dict[str, str]) -> str:
    """What a template's content depends on: the binaries (path, size, mtime), initdb's
    arguments without the data folder and password file, the appended settings, the uid."""
    st = (bindir / "postgres").stat()
    what = [str(bindir), version, st.st_size, st.st_mtime_ns, args, sorted(settings.items())]
    what.append(server_ids()[0])
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def _trusted_dir(path: Path) -> bool:
    return distrust(path, directory=True, private=True) is None


def find(key: str) -> Path | None:
    """The complete, trusted template for `key`, if there is one."""
    root = cache_root()
    folder = root / key
    if not (_trusted_dir(root) and _trusted_dir(folder)):
        return None
    marker = read_trusted_json(folder / MARKER, private=True)
    if marker is None or marker.get("key") != key or not (folder / "data" / "PG_VERSION").is_file():
        return None
    return folder / "data"


def copy_out(template: Path, data: Path) -> bool:
    """A copy of the template as `data` (which must not exist), owned by the server user;
    False (and nothing left) when it cannot be made."""
    try:
        shutil.copytree(template, data, symlinks=True)
        data.chmod(0o700)  # what PostgreSQL demands of its data folder
        if os.geteuid() == 0:
            uid, gid = server_ids()
            for folder, _dirs, files in os.walk(data):
                os.chown(folder, uid, gid)
                for name in files:
                    os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
        return True
    except OSError:
        shutil.rmtree(data, ignore_errors=True)
        return False


def publish(data: Path, key: str) -> None:
    """Keep a copy of a fresh data folder (initdb done, server never started) as the
    template for `key`. Best effort: a cache that cannot be written is skipped."""
    root = cache_root()
    tmp = root / f".{key}.{os.getpid()}.tmp"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _trusted_dir(root) or (root / key).exists():
            return
        shutil.rmtree(tmp, ignore_errors=True)  # left by a process of this PID that died
        tmp.mkdir(mode=0o700)
        shutil.copytree(data, tmp / "data", symlinks=True)
        write_private_json(tmp / MARKER, {"key": key, "from": str(data.parent.name)})
        os.rename(tmp, root / key)  # atomic; fails when another command published first
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp, ignore_errors=True)
