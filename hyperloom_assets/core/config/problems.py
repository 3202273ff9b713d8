"""A target file's problems: (file, field, what was expected), capped so a file cannot make them large. Pure code."""

from __future__ import annotations

from pydantic import ValidationError, field_validator

from hyperloom_assets.core.config.files import MAX_PROBLEMS_PER_ENTRY, capped
from hyperloom_assets.core.models import Strict


class TargetProblem(Strict):
    file: str
    field: str
    expected: str

    @field_validator("field", "expected")
    @classmethod
    def _short(cls, text: str) -> str:
        # A problem quotes what the file gave (pydantic's `input`), which a file can make as long as it likes.
        return capped(text)

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.expected}"


class TargetError(ValueError):
    """Raised where one named target is needed and its file is bad."""

    def __init__(self, problems: list[TargetProblem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def at_most(problems: list[TargetProblem], file: str, field: str = "(file)",
            total: int | None = None) -> list[TargetProblem]:
    """The first MAX_PROBLEMS_PER_ENTRY problems (of `total`, default all), the last saying how many more there were."""
    total = len(problems) if total is None else total
    if total <= MAX_PROBLEMS_PER_ENTRY:
        return problems
    kept = MAX_PROBLEMS_PER_ENTRY - 1
    return problems[:kept] + [TargetProblem(file=file, field=field, expected=(
        f"fewer problems: {total - kept} more not shown"))]


def problems_from_validation(file: str, error: ValidationError) -> list[TargetProblem]:
    problems = []
    for item in error.errors()[:MAX_PROBLEMS_PER_ENTRY + 1]:
        field = ".".join(str(part) for part in item["loc"]) or "(file)"
        if item["type"] == "extra_forbidden":
            expected = "no such field (unknown field)"
        elif item["type"] == "value_error" and item["loc"] == ("engine",):
            expected = str(item["ctx"]["error"])
        else:
            expected = f"{item['msg']}, got {item.get('input')!r}"
        problems.append(TargetProblem(file=file, field=field, expected=expected))
    return at_most(problems, file, total=error.error_count())
