"""What a served engine inherits from its host's environment: an allowlist. Pure code.

A server, and any patch a model proposed in its tree, runs with what this module lets
through, never the whole environment of the run that launched it: that run holds an LLM
provider's key, the store's password, the broker's URL and the user's SSH agent, none of
which an engine needs. What passes is what the platform needs to run a Python engine on an
accelerator (below, each group with its reason) and the engine's own variables (its
`env_prefixes` and `host_env_prefixes`); a credential never passes, whatever its prefix.
The explicit env (the target's, a candidate's, what the harness sets) is then laid on top
as given: it is written where a reader sees it, and it is what the `env` metadata records
as "set on top of the inherited environment". On an SSH host the agent builds the same
env from the host's own environment (resources/hosts/host_side.server_env).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

# The process basics: where programs are, whose home (the engines' caches default under
# it), the locale and time zone, the temporary folder, the terminal (colour in logs).
PLATFORM_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
                            "TMPDIR", "TMP", "TEMP",
                            # The native libraries an accelerator stack loads, and what its JIT
                            # compilers (Triton, Inductor) build kernels with at start-up.
                            "LD_LIBRARY_PATH", "LIBRARY_PATH", "CC", "CXX",
                            # The interpreter's own environment.
                            "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"})
PLATFORM_PREFIXES = (
    "LC_", "XDG_",  # the locale's categories; the cache and config folders (XDG_CACHE_HOME)
    "PYTHON",  # PYTHONPATH, PYTHONHOME, PYTHONUNBUFFERED, ...
    # Device visibility and the accelerator runtimes: NVIDIA, AMD, Intel.
    "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_", "HIP_", "ROCR_", "ROCM_", "HSA_", "RCCL_", "MIOPEN_",
    "ZE_", "ONEAPI_", "GPU_DEVICE_ORDINAL",
    # The frameworks an engine is built on: their caches, kernels and collectives.
    "TORCH", "PYTORCH_", "TRITON_", "GLOO_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "FLASHINFER_",
    # CPU threads: OpenMP and the math libraries (a pinned server's binding: cpu_pinning.py).
    "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "NVPL_", "DNNL_", "ONEDNN_",
)

# Credentials by name. Substrings that only ever name a secret; whole words (between `_`)
# for the shorter ones, so TOKENIZERS_PARALLELISM is not a token and HF_TOKEN is.
SECRET_SUBSTRINGS = ("SECRET", "PASSW", "PASSPHRASE", "CREDENTIAL", "PRIVATE", "APIKEY", "COOKIE")
SECRET_WORDS = frozenset({"KEY", "TOKEN", "AUTH", "PASS", "PWD"})
SECRET_WORD_ENDINGS = ("KEY", "TOKEN")  # ACCESSKEY, HFTOKEN
# Credentials whose names say nothing of it: the user's agents, database and broker
# addresses, the tool's own store and broker settings.
SECRET_NAMES = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DATABASE_URL", "REDIS_URL",
                          "BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "AMQP_URL", "KUBECONFIG",
                          "DOCKER_CONFIG", "NETRC", "PGPASSFILE", "PGSERVICEFILE", "GIT_ASKPASS", "SSH_ASKPASS"})
SECRET_PREFIXES = ("HYPERLOOM_POSTGRES_", "HYPERLOOM_CELERY_")
# A URL that carries a password (`scheme://user:password@host`), under any name.
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@")


def is_credential_name(name: str) -> bool:
    """Does this variable's name say it holds a secret (or is it a known one)?"""
    upper = name.upper()
    if upper in SECRET_NAMES or upper.startswith(SECRET_PREFIXES) or any(s in upper for s in SECRET_SUBSTRINGS):
        return True
    words = [word for word in upper.split("_") if word]
    return any(word in SECRET_WORDS or word.endswith(SECRET_WORD_ENDINGS) for word in words)


def carries_password(value: str) -> bool:
    """A value holding a URL with a password in it (a broker's, a proxy's, a database's)."""
    return _URL_WITH_PASSWORD.search(value) is not None


def may_inherit(name: str, value: str, engine_prefixes: Iterable[str] = ()) -> bool:
    """May a server inherit this variable from its host? The platform's and the engine's own, never a credential."""
    allowed = name in PLATFORM_NAMES or name.startswith(PLATFORM_PREFIXES + tuple(engine_prefixes))
    return allowed and not is_credential_name(name) and not carries_password(value)


def inherited_env(parent: Mapping[str, str], engine_prefixes: Iterable[str] = ()) -> dict[str, str]:
    """The part of the host's environment a server inherits."""
    prefixes = tuple(engine_prefixes)
    return {name: value for name, value in parent.items() if may_inherit(name, value, prefixes)}


def serving_env(parent: Mapping[str, str], engine_prefixes: Iterable[str], env: Mapping[str, str],
                unset_env: Iterable[str] = ()) -> dict[str, str]:
    """A server's environment: what it may inherit from `parent`, less `unset_env`, plus `env` as given."""
    result = inherited_env(parent, engine_prefixes)
    for name in unset_env:
        result.pop(name, None)
    result.update(env)
    return result
