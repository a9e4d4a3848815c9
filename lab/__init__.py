"""locklab: run concurrency bugs and their fixes against real PostgreSQL and Redis."""

import os as _os
import signal as _signal
import sys as _sys

__version__ = "0.1.0"


def _interrupted_while_starting(signum: int, frame: object) -> None:
    _sys.stderr.write("locklab: interrupted while starting; nothing was started\n")
    _os._exit(130)


# A Ctrl-C while the `locklab` command is still importing (a second or more on a loaded
# machine) ends like any other interrupt: one line, exit 130, not Python's traceback.
# Only for the command (not for a program importing lab); lab.cli.base.guarded restores the
# normal handler before it starts anything.
_argv0 = _sys.argv[0] if _sys.argv else ""
_command = _argv0 == "-m" or _os.path.basename(_argv0) == "locklab"
if _command and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)
