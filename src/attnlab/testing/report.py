"""What a check found: one :class:`CaseResult` per case, gathered in a :class:`CheckReport`
that prints as a table and raises in a test."""

from __future__ import annotations

from dataclasses import dataclass, field


class Unsupported(Exception):
    """Raised by a checked function for an input it declares it does not take (the case is
    reported as skipped, not failed)."""


@dataclass
class CaseResult:
    """One case in one dtype: passed or not, the worst error over its bound, and the detail."""
    case: str
    dtype: str
    passed: bool
    error: float = 0.0                    # worst error / bound (pass when <= 1)
    detail: str = ""
    smallest: str | None = None           # the smallest failing input, described
    skipped: bool = False

    def __str__(self) -> str:
        verdict = "skipped" if self.skipped else "pass" if self.passed else "FAIL"
        return (f"{self.case} [{self.dtype}]: {verdict}" + (f": {self.detail}" if self.detail
                                                            and not self.passed else "")
                + (f"; smallest failing input: {self.smallest}" if self.smallest else ""))


@dataclass
class CheckReport:
    """What :func:`check_attention` found. Prints as a table; falsy when a case failed."""

    name: str
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[CaseResult]:
        """The cases that failed."""
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        """Whether every case passed."""
        return not self.failures

    def __bool__(self) -> bool:
        return self.passed

    def table(self):
        """The report as a rich table: case, dtype, worst error / bound, pass or FAIL."""
        from rich.table import Table

        skipped = sum(r.skipped for r in self.results)
        t = Table(title=f"{self.name}: {len(self.results) - len(self.failures) - skipped}/"
                        f"{len(self.results) - skipped} cases passed, {skipped} skipped, in "
                        f"{self.seconds:.1f} s",
                  title_justify="left")
        for col in ("case", "dtype", "error / bound", "result"):
            t.add_column(col, overflow="fold")
        for r in self.results:
            t.add_row(r.case, r.dtype, "-" if r.skipped else f"{r.error:.2f}",
                      r.detail if r.skipped else "pass" if r.passed else f"FAIL: {r.detail}"
                      + (f" (smallest: {r.smallest})" if r.smallest else ""))
        return t

    def __str__(self) -> str:
        import io

        from rich.console import Console

        console = Console(width=120, record=True, file=io.StringIO())
        console.print(self.table())
        return console.export_text()

    def raise_for_failures(self) -> None:
        """Raise an AssertionError listing every failing case and its smallest failing input."""
        if self.failures:
            lines = [str(r) for r in self.failures]
            raise AssertionError(f"{self.name} failed {len(self.failures)} of "
                                 f"{len(self.results)} cases:\n  " + "\n  ".join(lines))
