"""The gate's fixed prompts: plain text any tokenizer reads, the same for every run. Pure code."""

from __future__ import annotations

SUBJECTS = ("The river", "A quiet engineer", "The old library", "Every morning the market", "The small robot",
            "Our team", "The mountain road", "A letter from home")
CLAUSES = ("began to explain why", "was remembered because", "slowly revealed that", "could not forget how")


def fixed_prompts(count: int) -> list[str]:
    """`count` distinct prompts; the first 32 are the gate's default."""
    prompts = []
    for i in range(count):
        subject, clause = SUBJECTS[i % len(SUBJECTS)], CLAUSES[(i // len(SUBJECTS)) % len(CLAUSES)]
        prompts.append(f"{subject} {clause} the number {i} mattered so much to everyone who")
    return prompts
