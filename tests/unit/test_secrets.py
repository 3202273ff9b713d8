"""Secrets are redacted wherever the tool writes (core/secrets.py): which names are secret, env,
argv in both forms, free text, JSON records, the result store, a run's target snapshot, the
scrub of model calls, and the report's Reproduce block, which a person can paste."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
import pytest
import yaml

from hyperloom_assets.core.report.markdown import render_markdown
from hyperloom_assets.core.secrets import (
    REDACTED,
    Redactor,
    is_secret_flag,
    is_secret_name,
    redact_argv,
    redact_env,
    restore_argv,
    shell_command,
    snapshot_text,
)
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.proposer.providers import scrub
from hyperloom_assets.resources.releases.package_index import PackageIndexError
from hyperloom_assets.resources.store.results import ResultStore
from tests.conftest import SIM_MODEL
from tests.unit.test_report import inputs

TOKEN = "hf_Zq8vN3kL5pR7tX2wY4bC"
KEY = "sk-live-9f8e7d6c5b4a"

SECRET = ["HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "DB_PASSWD", "ANTHROPIC_AUTH_TOKEN",
          "GOOGLE_APPLICATION_CREDENTIALS", "api_key", "--hf-token", "--api-key", "--admin-api-key",
          "--ssl-keyfile-password", "OPENAI_APIKEY"]
NOT_SECRET = ["--kv-cache-dtype", "--max-num-batched-tokens", "--max-prefill-tokens", "--return-tokens-as-token-ids",
              "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "VLLM_USE_FASTOKENS", "HF_TOKEN_PATH", "--ssl-keyfile",
              "--tokenizer", "--kt-max-deferred-experts-per-token", "--bucket-time-to-first-token",
              "S3_ACCESS_KEY_ID", "VLLM_CPU_KVCACHE_SPACE", "--enable-prefix-caching"]


@pytest.mark.parametrize("name", SECRET)
def test_names_that_hold_a_secret(name) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET)
def test_knobs_named_like_a_secret_are_not_one(name) -> None:
    """KEY is never KV, TOKENS (a count) is never TOKEN, a path or a rate is no secret."""
    assert not is_secret_name(name)


def test_argv_loses_each_secret_flags_values_in_both_forms_and_keeps_everything_else() -> None:
    argv = ["python", "-m", "vllm", "--model", "m", "--hf-token", TOKEN, "--api-key", KEY, "second-key",
            "--max-num-batched-tokens", "8192", f"--api-key={KEY}", "--hf-token", "--enforce-eager"]
    redacted = redact_argv(argv)
    assert redacted == ["python", "-m", "vllm", "--model", "m", "--hf-token", REDACTED, "--api-key", REDACTED,
                        REDACTED, "--max-num-batched-tokens", "8192", f"--api-key={REDACTED}", "--hf-token",
                        "--enforce-eager"], "vLLM's --api-key takes several; a bare --hf-token has none"
    assert restore_argv(redacted, argv) == argv, "a run's snapshot gets each value back from the file, in order"
    assert is_secret_flag(f"--hf-token={TOKEN}") and not is_secret_flag("HF_TOKEN")


def test_env_loses_secret_values_only() -> None:
    env = {"HF_TOKEN": TOKEN, "VLLM_CPU_KVCACHE_SPACE": "1", "EMPTY_TOKEN": ""}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "VLLM_CPU_KVCACHE_SPACE": "1", "EMPTY_TOKEN": ""}


def test_free_text_loses_known_values_named_shapes_and_url_passwords() -> None:
    secrets = Redactor.of(env={"HF_TOKEN": TOKEN}, argv=["--api-key", KEY])
    text = (f"server log: token {TOKEN} rejected; ServerArgs(api_key='{KEY}', admin_api_key=None); "
            "unrecognized arguments: --hf-token abcd; export PGPASSWORD=hunter2 "
            "postgresql://u:pw@db:5432/x?password=qwerty&sslmode=require max_num_batched_tokens=8192")
    shown = secrets.text(text)
    for secret in (TOKEN, KEY, "abcd", "hunter2", ":pw@", "qwerty"):
        assert secret not in shown, secret
    assert "admin_api_key=None" in shown and "sslmode=require" in shown and "max_num_batched_tokens=8192" in shown
    assert Redactor.of(env={"HF_TOKEN": "short"}).values == (), "a value too short to search for is masked only where named"


def test_a_json_record_loses_what_it_names_and_keeps_its_own_fields() -> None:
    record = {"context_key": "ctx-1", "argv": ["--hf-token", TOKEN], "env": {"HF_TOKEN": "x", "A": "1"},
              "reason": f"failed: {TOKEN}", "proposal": {"env": [{"name": "VLLM_API_KEY", "value": "v"}]},
              "evidence": {"hf_token": TOKEN, "max_num_seqs": 4}}
    redacted = Redactor.within(record).value(record)
    assert TOKEN not in json.dumps(redacted)
    assert redacted["context_key"] == "ctx-1", "the project's own lower-case fields are no env names"
    assert redacted["env"] == {"HF_TOKEN": REDACTED, "A": "1"}
    assert redacted["proposal"]["env"] == [{"name": "VLLM_API_KEY", "value": REDACTED}]
    assert redacted["evidence"] == {"hf_token": REDACTED, "max_num_seqs": 4}


def test_the_store_keeps_no_secret_in_any_column(tmp_path) -> None:
    store = ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}")
    argv = ["python", "-m", "vllm", "--hf-token", TOKEN, f"--api-key={KEY}"]
    env = {"HF_TOKEN": TOKEN, "VLLM_LOGGING_LEVEL": "INFO"}
    store.record_measurement(target="t", kind="baseline", argv=argv, env=env, started_at=datetime.now(timezone.utc),
                             evidence={"api_key": KEY}, error=f"argv_invalid: bad {TOKEN}")
    store.record_trial(context_key="c", target="t", fingerprint="f", variant={"set_env": {}}, outcome="FAILED",
                       record={"argv": argv, "env": env, "decision": {"reason": f"crash: {KEY}"}},
                       measurement_id=None, run_id="r")
    store.record_stack(target="t", context_key="c", keepers=[], result={"launch_argv": argv, "final_env": env})
    store.record_stop(target="t", stop_reason="baseline_failed", detail=f"bad: --hf-token {TOKEN}")
    data = (tmp_path / "results.db").read_bytes()
    assert TOKEN.encode() not in data and KEY.encode() not in data
    row = store.measurements("t")[0]
    assert row["argv"] == ["python", "-m", "vllm", "--hf-token", REDACTED, f"--api-key={REDACTED}"]
    assert row["env"] == {"HF_TOKEN": REDACTED, "VLLM_LOGGING_LEVEL": "INFO"}


def test_a_runs_snapshot_holds_no_secret_and_the_run_still_gets_the_real_one(tmp_path) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL), "env": {"HF_TOKEN": TOKEN},
        "server_args": ["--gpu", "H100", "--hf-token", TOKEN],
        "workload": {"kind": "random", "isl": 64, "osl": 16, "concurrency": 2}}))
    store = ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}")
    target = TargetCatalog(folder=str(folder)).run_target("sim", "run-1", store)
    assert target.env["HF_TOKEN"] == TOKEN and target.server_args[-1] == TOKEN, "the launch gets the real value"
    assert TOKEN.encode() not in (tmp_path / "results.db").read_bytes()
    assert TOKEN not in snapshot_text((folder / "sim.yaml").read_text())
    plain = "engine: sim\n# a comment stays\n"
    assert snapshot_text(plain) == plain, "a file without secrets is kept as it is"


def test_scrub_masks_every_secret_of_the_environment_not_only_the_sdk_keys(monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HYPERLOOM_POSTGRES_URL", "postgresql://u:pw-0123456789@db/x")
    said = scrub(f"401 for {TOKEN} at pw-0123456789")
    assert TOKEN not in said and "pw-0123456789" not in said


def test_the_reproduce_block_names_each_secrets_variable_and_a_shell_gets_the_real_value(tmp_path) -> None:
    argv = [sys.executable, "-c", "import json, os, sys; print(json.dumps([os.environ['HF_TOKEN'], sys.argv[1:]]))",
            "--hf-token", REDACTED, f"--api-key={REDACTED}", "--max-num-seqs", "4"]
    env = {"HF_TOKEN": REDACTED, "VLLM_LOGGING_LEVEL": "INFO WARN"}
    line, variables = shell_command(env, argv)
    assert 'HF_TOKEN="$HF_TOKEN"' in line and '--hf-token "$HF_TOKEN"' in line and '--api-key="$API_KEY"' in line
    assert variables == ["HF_TOKEN", "API_KEY"]
    pasted = subprocess.run(["bash", "-c", line], env={"HF_TOKEN": TOKEN, "API_KEY": KEY, "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, check=True)
    assert json.loads(pasted.stdout) == [TOKEN, ["--hf-token", TOKEN, f"--api-key={KEY}", "--max-num-seqs", "4"]]
    text = render_markdown(inputs(baseline_env=env, baseline_argv=argv, final_env={}, final_argv=["vllm"]))
    assert line in text and "set `HF_TOKEN`, `API_KEY` in your shell first" in text
    assert REDACTED not in text.split("## Reproduce")[1].split("## Launch evidence")[0]


def test_a_package_index_error_shows_no_credential_of_its_url() -> None:
    said = str(PackageIndexError("vllm", f"https://ci:{TOKEN}@index.example/pypi/vllm/json", "HTTP Error 401"))
    assert TOKEN not in said and "https://ci:<redacted>@index.example/pypi/vllm/json" in said
