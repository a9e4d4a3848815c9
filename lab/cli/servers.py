"""Keeping embedded servers between commands: servers up, down, status."""

from __future__ import annotations

from lab.cli.base import guarded, out, servers_app
from lab.output import console as report
from lab.servers import servers_down, servers_up


@servers_app.command("up")
def servers_up_cmd() -> None:
    """Start embedded PostgreSQL and Redis and keep them for later commands."""
    guarded(lambda: report.servers(out(), servers_up().infos()))


@servers_app.command("down")
def servers_down_cmd() -> None:
    """Stop the servers `servers up` started (by their recorded PIDs)."""

    def body() -> None:
        stopped = servers_down()
        out().print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))

    guarded(body)


@servers_app.command("status")
def servers_status_cmd() -> None:
    """Show the kept servers, if any."""

    def body() -> None:
        from lab.procs.trust import distrust
        from lab.servers import kept_servers, state_path

        kept = kept_servers()
        folder = state_path().parent
        why = distrust(folder, directory=True, private=True)
        if kept is None and why not in (None, "does not exist"):
            # `servers up` would refuse it too (the line above said why)
            out().print(f"no kept servers: {folder} is not usable; remove it or set TMPDIR")
        elif kept is None:
            out().print("no kept servers (start them with `locklab servers up`)")
        else:
            report.servers(out(), kept.infos())

    guarded(body)
