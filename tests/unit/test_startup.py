"""The app builds its page without the heavy libraries: they load when a handler first needs them
(start-up within 1.2x a bare Gradio app; bench/startup.py measures it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["torch", "transformers", "trl", "peft", "datasets", "lancedb", "sentence_transformers", "pyarrow.dataset"]

PROBE = """
import json, sys
import app
app.build_app()
print(json.dumps(sorted(m for m in %r if m in sys.modules)))
""" % (HEAVY,)


def test_building_the_app_imports_no_model_or_database_library(tmp_path):
    # No GPU visible, as on a CPU-only machine: on a GPU box the form asks torch how many GPUs there are.
    env = dict(os.environ, GRPO_STUDIO_DATA=str(tmp_path), CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
