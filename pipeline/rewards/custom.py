"""A reward written as Python by the user: opt-in (--allow-custom-rewards), run only by the trainer and the
scoring child process, each started with the environment `custom_code_env` keeps."""

from __future__ import annotations

import os
from typing import Any, Mapping

from pipeline.rewards.text import completion_text

# What the rewards table offers to edit: a reward that runs and scores everything 0.
TEMPLATE = "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n"


# The environment custom reward code gets: an allow-list of what Python, the libraries and the hardware need,
# by name. Everything else stays behind: Hub and API tokens, cloud credentials, proxy settings (they may carry a
# password), the app's own settings. Custom code runs as the server's user: it can still read that user's files
# (a token saved by `huggingface-cli login` included) and reach the network.
CUSTOM_CODE_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "TEMP", "TMP",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "TOKENIZERS_PARALLELISM", "NVIDIA_VISIBLE_DEVICES",
    "HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "SENTENCE_TRANSFORMERS_HOME",
    "XDG_CACHE_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT",
    "HF_HUB_DISABLE_TELEMETRY", "GRPO_STUDIO_DATA",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",  # where the trusted certificates are
})
CUSTOM_CODE_ENV_PREFIXES = ("LC_", "CUDA_", "NCCL_", "PYTORCH_", "TORCH_")  # locale, GPUs and torch: no secrets
NO_TOKEN_HINT = ("Runs with custom reward code start without your Hub token (the code could read it), so a gated "
                 "or private model or dataset must already be on this machine: download it once (`huggingface-cli "
                 "download ID`, or a run without custom rewards), then start again.")


def custom_code_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `environ` (default: this process's) that custom reward code may see.

    >>> sorted(custom_code_env({"PATH": "/bin", "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "LC_ALL": "C"}))
    ['LC_ALL', 'PATH']
    """
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if name in CUSTOM_CODE_ENV or name.startswith(CUSTOM_CODE_ENV_PREFIXES)}


class CustomPython:
    """User-typed code defining `reward(completions, **kwargs) -> list[float]`.

    Arbitrary code: the registry only builds it when the app or CLI was started with
    --allow-custom-rewards, and only the trainer and scoring subprocesses ever call it, started with
    `custom_code_env` (no tokens or credentials).
    """

    def __init__(self, code: str = TEMPLATE, name: str = "custom"):
        self.code, self.__name__ = code, name
        self.max_value = None  # unknown: evaluation reports a plain delta
        namespace: dict[str, Any] = {}
        try:
            compiled = compile(code, f"<custom reward {name}>", "exec")
        except SyntaxError as exc:
            raise ValueError(f"custom reward code has a syntax error on line {exc.lineno}: {exc.msg}") from None
        exec(compiled, namespace)  # noqa: S102 - opt-in only
        fn = namespace.get("reward")
        if not callable(fn):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")
        self._fn = fn

    def __call__(self, completions, **kwargs):
        texts = [completion_text(c) for c in completions]
        return self._fn(texts, **kwargs)  # the guard reads it: a generator or tuple is fine, None is named

    @staticmethod
    def check(code: str) -> None:
        """Parse the code without running it (the web server never executes custom rewards).

        >>> CustomPython.check("def reward(completions, **kw): return [0.0] * len(completions)")
        >>> CustomPython.check("x = 1")
        Traceback (most recent call last):
        ValueError: custom reward code must define a function named 'reward(completions, **kwargs)'
        """
        import ast

        try:
            tree = ast.parse(code or "", "<custom reward>")
        except SyntaxError as exc:
            raise ValueError(f"custom reward code has a syntax error on line {exc.lineno}: {exc.msg}") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == "reward" for node in tree.body):
            raise ValueError("custom reward code must define a function named 'reward(completions, **kwargs)'")
