"""The symbol check of a model's equations: every symbol they use is defined, by an equation's
left-hand side or by the symbol table."""

from __future__ import annotations

import re

from attnlab.models.latex import Equations

_FUNCS = re.compile(r"\\(mathrm|mathbb|text|operatorname)\{[^{}]*\}")
_DROP = re.compile(r"\\(left|right|frac|sqrt|sum|quad|qquad|ldots|cdots|lceil|rceil|in|top|"
                   r"times|exp|log|sin|cos|bmod|cdot|overrightarrow|overleftarrow|big|Big|"
                   r"max|min|pi)\b")
_BOLD = re.compile(r"\\(mathbf|boldsymbol)\{([A-Za-z])\}")
_HAT = re.compile(r"\\(hat|tilde|bar)\{([A-Za-z])\}")
_GREEK = re.compile(r"\\(alpha|beta|gamma|delta|Delta|epsilon|zeta|eta|theta|lambda|mu|nu|xi|"
                    r"rho|sigma|tau|phi|varphi|chi|psi|omega|Omega|Sigma|Phi)\b")
INDICES = frozenset({"t", "h", "tau", "i", "j", "k", "l", "m"})


_SUP = re.compile(r"\^(\{[^{}]*(\{[^{}]*\}[^{}]*)*\}|\\?[A-Za-z0-9]+)")
_SUB = re.compile(r"_(\{[^{}]*(\{[^{}]*\}[^{}]*)*\}|[A-Za-z0-9])")


def _names(tex: str) -> set[str]:
    """Base names of the symbols in a piece of math: ``bf:W``, ``hat:y``, ``alpha``, ``y``,
    ``cal:N``. Superscripts are labels (``W^Q``, ``a^{(k)}``); in subscripts only capital
    letters count (sizes such as the L of ``h_L``), lowercase ones are indices or labels."""
    s = _FUNCS.sub(" ", tex)
    found = {f"cal:{m.group(1)}" for m in re.finditer(r"\\mathcal\{([A-Za-z])\}", s)}
    s = re.sub(r"\\mathcal\{[A-Za-z]\}", " ", s)
    s = _SUP.sub(" ", s)
    s = _SUB.sub(lambda m: " " + " ".join(re.findall(r"(?<![A-Za-z\\])[A-Z](?![A-Za-z])",
                                                     m.group(1))) + " ", s)
    found |= {f"bf:{m.group(2)}" for m in _BOLD.finditer(s)}
    s = _BOLD.sub(" ", s)
    found |= {f"hat:{m.group(2)}" for m in _HAT.finditer(s)}
    s = _HAT.sub(" ", s)
    found |= {m.group(1) for m in _GREEK.finditer(s)}
    s = _GREEK.sub(" ", s)
    s = _DROP.sub(" ", s)
    s = re.sub(r"\\[A-Za-z]+", " ", s)                  # any other command: not a symbol
    found |= set(re.findall(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])", s))
    return found


def undefined_symbols(eq: Equations, extra: list[tuple[str, str]] = ()) -> set[str]:
    """Symbols the equations use that neither an equation's left-hand side nor the symbol
    table (``eq.where`` and ``extra``) defines; index letters (t, h, tau, ...) are exempt."""
    defined, used = set(), set()
    for lhs, rhs in eq.lines:
        defined |= _names(lhs)
        # "a = ..., \quad b = ...": the later definitions on one line define b
        for part in re.split(r"\\quad|,\s*\\;", rhs):
            if "=" in part and not part.strip().startswith(("t =", "h =", "j =", "l =")):
                left, right = part.split("=", 1)
                defined |= _names(left)
                used |= _names(right)
            elif r"\in \mathbb" in part and part is not rhs:     # "\quad W \in R^{a x b}"
                for decl in part.split(r"\in \mathbb")[:-1]:
                    defined |= _names(decl.split(",")[-1])
            else:
                used |= _names(part)
    for sym, _ in list(eq.where) + list(extra):
        defined |= _names(sym)
    return used - defined - INDICES
