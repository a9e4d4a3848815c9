"""A lane process of `locklab verify` (lab/lanes.py): ``python lab/lane_child.py LAB_PID``."""

from lab.lanes import child_main
from lab.workers import run_child

if __name__ == "__main__":
    run_child(child_main)
