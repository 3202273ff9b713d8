"""Real-engine tier: vLLM CPU with the generated tiny Llama (fixtures in tests/conftest.py)."""
