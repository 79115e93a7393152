"""The jobs behind ``attnlab fit forecast|tabular|graph``, ``attnlab predict`` and ``attnlab
paper``: load data, evaluate against baselines, fit the final model, write metrics, figures,
the model and its equations into one folder. Every file is written atomically.

    folder   the result folder (check_out, result_folder)
    paper    the paper sections (write_paper, compile_tex)
    series   fit forecast, fit forecast --id, predict
    tables   fit tabular, fit graph
"""

from attnlab.cli.jobs.folder import CLI_BASELINES, MARKER, Say, check_out, result_folder
from attnlab.cli.jobs.paper import ENGINES, compile_tex, write_paper
from attnlab.cli.jobs.predict import predict_saved
from attnlab.cli.jobs.series import (
    DEFAULT_ORIGINS,
    default_origins,
    fit_forecast,
    fit_global,
)
from attnlab.cli.jobs.tables import fit_graph, fit_tabular

__all__ = ["CLI_BASELINES", "DEFAULT_ORIGINS", "ENGINES", "MARKER", "Say", "check_out",
           "compile_tex", "default_origins", "fit_forecast", "fit_global", "fit_graph",
           "fit_tabular", "predict_saved", "result_folder", "write_paper"]
