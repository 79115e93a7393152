"""What the window forecasters (one series, many series, places over time) share: the season
in use, the lookback and the shortest series they fit."""

from __future__ import annotations


class WindowSettings:
    """What the window forecasters share: the season in use, the lookback and the shortest
    series they fit (``_history`` + horizon + 10 training windows)."""

    @property
    def effective_season(self) -> int:
        """The seasonal period in use: ``season``, or 1 without one."""
        return int(self.season) if self.season else 1

    @property
    def effective_lookback(self) -> int:
        """The past steps the model reads: ``lookback``, or its default (3 seasons, or 24)."""
        if self.lookback is not None:
            return int(self.lookback)
        return 3 * self.effective_season if self.effective_season > 1 else 24

    @property
    def min_length(self) -> int:
        """The shortest series :meth:`fit` accepts: the history plus horizon plus 10 windows."""
        return self._history + self.horizon + 10
