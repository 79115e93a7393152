"""Bundled example data: nothing is downloaded (statsmodels and scikit-learn ship these files).

Time series (pandas Series with a DatetimeIndex, and the settings the examples use):

* ``co2``: Mauna Loa CO2 (ppm), weekly 1958-2001 in statsmodels, averaged to monthly means;
  the few months with no reading are linearly interpolated. 526 months, season 12.
* ``sunspots``: yearly mean sunspot number 1700-2008 (statsmodels), 309 years; the ~11-year
  Schwabe cycle is used as the season (it varies between about 9 and 14 years).
* ``elnino``: monthly sea surface temperature of the El Nino region (deg C), 1950-2010
  (statsmodels), 732 months, season 12: a strong annual cycle with irregular multi-year
  El Nino / La Nina swings on top.
* ``unemployment``: the US civilian unemployment rate (%), quarterly 1959-2009 (statsmodels'
  macrodata), 203 quarters, season 4: persistent, no clear season, recessions as jumps.

Many series (:func:`load_panel`): ``us_employment``, US employment by industry (thousands),
monthly 2006-2015, 120 months x 15 industries that do not overlap (vega_datasets' bundled
copy of the BLS series).

Tables (pandas DataFrame and target Series, from scikit-learn): ``diabetes`` (regression,
442 rows, 10 features), ``breast_cancer`` (binary, 569 x 30), ``wine`` (3 classes, 178 x 13).
"""

from __future__ import annotations

from dataclasses import dataclass

SERIES = ("co2", "sunspots", "elnino", "unemployment")
TABLES = ("diabetes", "breast_cancer", "wine")


@dataclass(frozen=True)
class SeriesExample:
    """A bundled series with its horizon, season and number of backtest origins."""
    y: "object"          # pandas Series with a DatetimeIndex
    season: int
    horizon: int
    n_origins: int
    description: str


def load_series(name: str) -> SeriesExample:
    """One of :data:`SERIES` with its example settings."""
    import pandas as pd

    if name == "co2":
        from statsmodels.datasets import co2

        weekly = co2.load_pandas().data["co2"]
        y = weekly.resample("MS").mean().interpolate(limit_direction="both")
        y.name = "co2"
        return SeriesExample(y, 12, 12, 10, "Mauna Loa CO2, monthly mean (ppm), 1958-2001")
    if name == "sunspots":
        from statsmodels.datasets import sunspots

        df = sunspots.load_pandas().data
        idx = pd.to_datetime(df["YEAR"].astype(int).astype(str), format="%Y")
        y = pd.Series(df["SUNACTIVITY"].to_numpy(dtype=float), index=idx, name="sunspots")
        return SeriesExample(y, 11, 11, 5, "Yearly mean sunspot number, 1700-2008")
    if name == "elnino":
        from statsmodels.datasets import elnino

        df = elnino.load_pandas().data
        months = df.columns[1:]
        values = df[months].to_numpy(dtype=float).reshape(-1)
        idx = pd.date_range(f"{int(df['YEAR'].iloc[0])}-01-01", periods=len(values), freq="MS")
        y = pd.Series(values, index=idx, name="elnino")
        return SeriesExample(y, 12, 12, 10, "El Nino region sea surface temperature, monthly "
                             "(deg C), 1950-2010")
    if name == "unemployment":
        from statsmodels.datasets import macrodata

        df = macrodata.load_pandas().data
        idx = pd.PeriodIndex.from_fields(year=df["year"].astype(int),
                                         quarter=df["quarter"].astype(int),
                                         freq="Q").to_timestamp()
        y = pd.Series(df["unemp"].to_numpy(dtype=float), index=idx, name="unemployment")
        return SeriesExample(y, 4, 8, 6, "US civilian unemployment rate, quarterly (%), "
                             "1959-2009")
    raise ValueError(f"unknown series example {name!r}; choose one of {', '.join(SERIES)}")


PANELS = ("us_employment",)
EMPLOYMENT_INDUSTRIES = (
    "mining_and_logging", "construction", "durable_goods", "nondurable_goods",
    "wholesale_trade", "retail_trade", "transportation_and_warehousing", "utilities",
    "information", "financial_activities", "professional_and_business_services",
    "education_and_health_services", "leisure_and_hospitality", "other_services", "government")


def load_panel(name: str):
    """One of :data:`PANELS` as a DataFrame (DatetimeIndex, one column per series)."""
    import pandas as pd

    if name != "us_employment":
        raise ValueError(f"unknown panel {name!r}; choose one of {', '.join(PANELS)}")
    from vega_datasets import local_data

    df = local_data.us_employment()
    out = df[list(EMPLOYMENT_INDUSTRIES)].astype(float)
    out.index = pd.DatetimeIndex(pd.to_datetime(df["month"]), name="month")
    return out


def load_table(name: str):
    """One of :data:`TABLES` as ``(X DataFrame, y Series, task)`` with task
    ``"classification"`` or ``"regression"``."""
    from sklearn import datasets

    loaders = {"diabetes": (datasets.load_diabetes, "regression"),
               "breast_cancer": (datasets.load_breast_cancer, "classification"),
               "wine": (datasets.load_wine, "classification")}
    if name not in loaders:
        raise ValueError(f"unknown table example {name!r}; choose one of {', '.join(TABLES)}")
    fn, task = loaders[name]
    bunch = fn(as_frame=True)
    return bunch.data, bunch.target.rename("target"), task
