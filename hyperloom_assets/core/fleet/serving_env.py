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

from hyperloom_assets.core.secrets import is_secret_name, url_secrets

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

# Credentials by name, beyond the redaction's rule (a last word ending in key, token, secret,
# password or credential: core/secrets.is_secret_name): substrings that only ever name a
# secret, and short last words (MYSQL_PWD, ANTHROPIC_AUTH). A word inside a name is not enough:
# VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD is a tuning knob, and a server must get it.
SECRET_SUBSTRINGS = ("SECRET", "PASSW", "PASSPHRASE", "CREDENTIAL", "PRIVATE", "APIKEY", "COOKIE")
SECRET_LAST_WORDS = frozenset({"AUTH", "PASS", "PWD"})
# Credentials whose names say nothing of it: the user's agents, database and broker
# addresses, the tool's own store and broker settings.
SECRET_NAMES = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DATABASE_URL", "REDIS_URL",
                          "BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "AMQP_URL", "KUBECONFIG",
                          "DOCKER_CONFIG", "NETRC", "PGPASSFILE", "PGSERVICEFILE", "GIT_ASKPASS", "SSH_ASKPASS"})
SECRET_PREFIXES = ("HYPERLOOM_POSTGRES_", "HYPERLOOM_CELERY_")


def is_credential_name(name: str) -> bool:
    """Does this variable's name say it holds a secret (or is it a known one)?"""
    upper = name.upper()
    if upper in SECRET_NAMES or upper.startswith(SECRET_PREFIXES) or any(s in upper for s in SECRET_SUBSTRINGS):
        return True
    words = [word for word in upper.split("_") if word]
    return is_secret_name(name) or bool(words) and words[-1] in SECRET_LAST_WORDS


def carries_password(value: str) -> bool:
    """A value holding a URL with a password in it (a broker's, a proxy's, a database's), in its
    user part or its query."""
    return bool(url_secrets(value))


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
