"""`hyperloom bench` and `hyperloom agentic-trace`: exit codes, messages, the flat JSON."""

import json
from pathlib import Path

from hyperloom_assets.cli.main import main
from hyperloom_assets.core.measurement.measurement import METRIC_NAMES
from hyperloom_assets.core.measurement.workloads import read_trace

EXAMPLE_TRACE = Path(__file__).resolve().parents[2] / "examples" / "agentic_small.jsonl"


def _model_dir(tmp_path: Path, max_positions: int = 4096) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
              "max_position_embeddings": max_positions}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_bench_writes_the_flat_json(echo_server, tmp_path, capsys):
    url = echo_server()
    out = tmp_path / "out" / "bench.json"
    code = main(["bench", "--base-url", url, "--model", "echo", "--workload", "random", "--isl", "16", "--osl", "4",
                 "--concurrency", "2", "--num-prompts", "6", "--repeats", "2", "--vocab-size", "500",
                 "--json-out", str(out)])
    assert code == 0, capsys.readouterr().err
    flat = json.loads(out.read_text())
    for name in METRIC_NAMES + ("completed", "output_throughput_ci_low", "output_throughput_ci_high"):
        assert name in flat
    assert flat["completed"] == 6 and len(flat["repeats"]) == 2
    assert flat["workload"]["warmups"] == 2  # min(concurrency, 8)
    assert (tmp_path / "out" / "bench-records" / "requests-repeat-2.jsonl").is_file()
    assert "output tok/s" in capsys.readouterr().out


def test_bench_agentic_with_a_local_model_folder(echo_server, tmp_path, capsys):
    url = echo_server()
    model = _model_dir(tmp_path)
    out = tmp_path / "agentic.json"
    code = main(["bench", "--base-url", url, "--model", str(model), "--served-model-name", "echo",
                 "--workload", "agentic", "--trace", str(EXAMPLE_TRACE), "--concurrency", "8", "--warmups", "0",
                 "--no-records", "--json-out", str(out)])
    assert code == 0, capsys.readouterr().err
    flat = json.loads(out.read_text())
    assert flat["completed"] == 32 and flat["theoretical_prefix_hit_pct"] > 50
    assert flat["workload"]["vocab_size"] == 300  # from the folder's config.json
    assert not (tmp_path / "agentic-records").exists()


def test_prompt_longer_than_the_model_is_refused(tmp_path, capsys):
    model = _model_dir(tmp_path, max_positions=100)
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", str(model), "--workload", "random",
                 "--isl", "90", "--osl", "20", "--concurrency", "1", "--num-prompts", "1", "--json-out",
                 str(tmp_path / "o.json")])
    assert code == 2
    assert "needs 110 tokens" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_bad_trace_line_is_named(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(EXAMPLE_TRACE.read_text().splitlines()[0] + "\n{broken\n")
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--workload", "agentic",
                 "--trace", str(trace), "--concurrency", "1", "--json-out", str(tmp_path / "o.json")])
    assert code == 2
    assert f"{trace}: line 2: not JSON" in capsys.readouterr().err


def test_missing_trace_and_missing_lengths(tmp_path, capsys):
    args = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
            "--json-out", str(tmp_path / "o.json")]
    assert main(args + ["--workload", "agentic", "--trace", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: cannot read trace" in capsys.readouterr().err
    assert main(args + ["--workload", "random", "--isl", "8"]) == 2
    assert "--osl" in capsys.readouterr().err
    assert main(args + ["--workload", "random", "--isl", "0", "--osl", "4"]) == 2
    assert "isl" in capsys.readouterr().err


def test_flag_errors_exit_non_zero_with_a_message(tmp_path, capsys):
    assert main(["bench", "--base-url", "x", "--model", "m", "--workload", "chat", "--concurrency", "1",
                 "--json-out", "o.json"]) == 2
    assert "invalid choice: 'chat'" in capsys.readouterr().err
    assert main(["bench", "--base-url", "x"]) == 2
    assert "required" in capsys.readouterr().err


def test_unreachable_server_is_a_run_failure(tmp_path, capsys):
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--workload", "random", "--isl", "8",
                 "--osl", "2", "--concurrency", "1", "--num-prompts", "1", "--json-out", str(tmp_path / "o.json")])
    assert code == 1
    assert "every warm-up request failed" in capsys.readouterr().err


def test_agentic_trace_command(tmp_path, capsys):
    out = tmp_path / "trace.jsonl"
    assert main(["agentic-trace", "--sessions", "3", "--turns", "2", "--user-tokens", "16", "--output-tokens", "8",
                 "--out", str(out)]) == 0
    sessions = read_trace(out)
    assert len(sessions) == 3 and all(len(s.turns) == 2 and s.turns[1].output_tokens == 8 for s in sessions)
    assert main(["agentic-trace", "--sessions", "1", "--turns", "1", "--output-tokens", "0",
                 "--out", str(tmp_path / "bad.jsonl")]) == 2
    assert "--output-tokens must be at least 1" in capsys.readouterr().err
