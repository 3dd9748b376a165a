"""Steer a run while it trains, from a terminal: `python -m pipeline.steer --run-dir DIR --set learning_rate=1e-5`.
The rules and files are in pipeline/setup/steering.py."""

import sys

from pipeline.setup.steering import main

if __name__ == "__main__":
    sys.exit(main())
