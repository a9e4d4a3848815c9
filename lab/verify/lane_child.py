"""A lane process of `locklab verify` (lab/verify/lanes.py): ``python lab/verify/lane_child.py LAB_PID``.
The lane's side of the protocol: run the jobs the lab sends, one at a time."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.core.profiles import Profile
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.procs.workers import Child, run_child
from lab.servers import Servers
from lab.verify.lanes import put_json, servers_from


async def child_main(child: Child) -> None:
    """Run the jobs the lab sends, one at a time, until it says stop (or SIGTERM)."""
    from lab.load.databases import drop_spares
    from scenarios import by_id

    cfg = child.config
    os.environ["LOCKLAB_RESULTS"] = cfg["results"]  # lab.core.results.results_root
    servers = servers_from(cfg["servers"])
    profile = Profile.of(cfg["profile"])  # crossed the process boundary by name
    catalogue = by_id()
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        while True:
            msg = await child.receive()
            if msg.get("stop"):
                return
            job = msg["job"]
            try:
                payload = await _run_job(
                    child, cfg, profile, servers, catalogue[job["scenario"]], job
                )
            except LabError as exc:
                child.emit("refused", error=str(exc))
                continue
            path = put_json(Path(cfg["outdir"]) / f"job-{job['index']}.json", payload)
            child.emit("done", path=str(path))
    finally:
        await drop_spares(servers)


async def _run_job(
    child: Child,
    cfg: Mapping[str, Any],
    profile: Profile,
    servers: Servers,
    sc: Scenario,
    job: Mapping[str, Any],
) -> dict[str, Any]:
    from lab.verify import explore_part, verify_scenario

    if job["part"] < 0:
        res = await verify_scenario(
            sc,
            profile,
            servers,
            run_id=cfg["run_id"],
            seed=cfg["seed"],
            trials=cfg["trials"],
            write=cfg["write"],
            case=job["case"],
            spare=True,
            counterfactual=cfg.get("counterfactual", False),
            on_step=lambda text: child.emit("progress", text=text),
        )
        return {"verdicts": res.to_json(), "records": res.records}
    try:
        record = await explore_part(
            sc,
            profile,
            servers,
            job["variants"],
            run_id=cfg["run_id"],
            part=job["part"],
            counterfactual=cfg.get("counterfactual", False),
        )
    except LabError:
        raise
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"record": record}


if __name__ == "__main__":
    run_child(child_main)
