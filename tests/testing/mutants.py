"""A catalogue of mutants: the wrong answers a learner plausibly writes, as transformations of a
correct answer, written once and applied to every exercise.

Each operator takes a correct answer ``fn`` and returns a wrong one. Where an operator does not
apply to an exercise (no boolean input to invert, no square input to transpose, no keyword the
check passes), calling the mutant raises :class:`NotApplicable`, and the catalogue leaves it
out for that exercise. A mutant that applies must fail the exercise's check: one that passes is
a defect of the check, fixed by better probes or a stricter rule.

The operators, by the catalogue of the checks' issue:

* ``in_bfloat16``, ``in_float16``: a half-precision computation (inputs rounded to the half
  type, the result cast back to the inputs' dtype);
* ``wrong_axis``: the answer applied along the other axis (square inputs transposed, the result
  transposed back);
* ``mask_inverted``: every boolean input inverted (mask polarity);
* ``scale_doubled``: the first floating input doubled (a missing or extra scale);
* ``first_call_only``: the first probe's result returned for every probe (right only for the
  default arguments, or for the first shape);
* ``keywords_ignored``: the keywords the check passes dropped (``scale=``, ``mask=``, ...);
* ``last_off_by_one``: the last entry along the last axis replaced by its neighbour (an end
  bound off by one);
* ``shifted``: the result rolled by one place along its last axis (every index off by one);
* ``plus_one``: a count or a number off by one;
* ``last_bound_plus_one``, ``last_bound_minus_one``, ``first_bound_plus_one``,
  ``first_bound_minus_one``: an index bound off by one (the last integer input: a tile end,
  a window edge, a diagonal; the first of two or more: a start);
* ``args_swapped``: the first two inputs in the other order (``m`` and ``m'``, ``q`` and
  ``k``);
* ``output_doubled``, ``output_halved``: a factor of two lost or added (K and V, a mean and a
  sum over two);
* ``reciprocal``: a ratio the wrong way up (``e^{m' - m}`` for ``e^{m - m'}``);
* ``negated``: a sign lost;
* ``squared``: a variance for a standard deviation (a kernel's width), a square not undone;
* ``one_dropped``: the last of several results left out (a loop that stops one short).
"""

from __future__ import annotations

import numbers

import torch


class NotApplicable(Exception):
    """This operator has nothing to change in this exercise's inputs or results."""


def _map(x, tensor_fn, number_fn=None):
    """Apply to every tensor (and, with ``number_fn``, every number) in a result."""
    if isinstance(x, torch.Tensor):
        return tensor_fn(x)
    if isinstance(x, tuple):
        return tuple(_map(y, tensor_fn, number_fn) for y in x)
    if isinstance(x, list):
        if x and all(isinstance(y, numbers.Number) and not isinstance(y, bool) for y in x):
            return _map(torch.tensor(x), tensor_fn, number_fn).tolist()
        return [_map(y, tensor_fn, number_fn) for y in x]
    if number_fn is not None and isinstance(x, numbers.Number) and not isinstance(x, bool):
        return number_fn(x)
    if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
        return _map(torch.as_tensor(x), tensor_fn, number_fn)
    return x


def _half(dtype):
    def op(fn):
        def mutant(*args, **kwargs):
            if not any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args):
                raise NotApplicable("no floating input")
            back = next(a.dtype for a in args if isinstance(a, torch.Tensor)
                        and a.is_floating_point())
            args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point()
                    else a for a in args]
            out = fn(*args, **kwargs)
            return _map(out, lambda t: t.to(back) if t.is_floating_point() else t)
        return mutant
    return op


def wrong_axis(fn):
    def mutant(*args, **kwargs):
        square = [isinstance(a, torch.Tensor) and a.dim() >= 2 and a.shape[-1] == a.shape[-2]
                  and a.shape[-1] > 1 for a in args]
        if not any(square):
            raise NotApplicable("no square input")
        args = [a.transpose(-2, -1) if s else a for a, s in zip(args, square)]
        out = fn(*args, **kwargs)
        return _map(out, lambda t: t.transpose(-2, -1) if t.dim() >= 2
                    and t.shape[-1] == t.shape[-2] else t)
    return mutant


def mask_inverted(fn):
    def mutant(*args, **kwargs):
        flags = [isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args]
        kw_flags = {k: isinstance(v, torch.Tensor) and v.dtype == torch.bool
                    for k, v in kwargs.items()}
        if not any(flags) and not any(kw_flags.values()):
            raise NotApplicable("no boolean input")
        args = [~a if f else a for a, f in zip(args, flags)]
        kwargs = {k: ~v if kw_flags[k] else v for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return mutant


def scale_doubled(fn):
    def mutant(*args, **kwargs):
        i = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                  and a.is_floating_point()), None)
        if i is None:
            j = next((i for i, a in enumerate(args) if isinstance(a, float)), None)
            if j is None:
                raise NotApplicable("no floating input")
            args = list(args)
            args[j] = args[j] * 2
            return fn(*args, **kwargs)
        args = list(args)
        args[i] = args[i] * 2
        return fn(*args, **kwargs)
    return mutant


def first_call_only(fn):
    memo = []

    def mutant(*args, **kwargs):
        if not memo:
            memo.append(fn(*args, **kwargs))
        return memo[0]
    return mutant


def keywords_ignored(fn):
    def mutant(*args, **kwargs):
        if not kwargs or all(v is None for v in kwargs.values()):
            raise NotApplicable("the check passes no keyword")
        return fn(*args)
    return mutant


def _last(t):
    if t.dim() == 0 or t.shape[-1] < 2:
        return t
    t = t.clone()
    t[..., -1] = t[..., -2]
    return t


def last_off_by_one(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs), _last)
    return mutant


def shifted(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs),
                    lambda t: t.roll(1, -1) if t.dim() and t.shape[-1] > 1 else t)
    return mutant


def plus_one(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs), lambda t: t + 1 if t.dtype != torch.bool else ~t,
                    lambda x: x + 1)
    return mutant


def _bound(which: str, delta: int):
    """An index bound off by ``delta``: the last integer input (a tile end, a window edge, a
    diagonal), or the first of two or more (a start)."""
    def op(fn):
        def mutant(*args, **kwargs):
            ints = [i for i, a in enumerate(args) if isinstance(a, int)
                    and not isinstance(a, bool)]
            if not ints or (which == "first" and len(ints) < 2):
                raise NotApplicable("no integer bound")
            i = ints[-1] if which == "last" else ints[0]
            args = list(args)
            args[i] += delta
            return fn(*args, **kwargs)
        return mutant
    return op


def args_swapped(fn):
    def mutant(*args, **kwargs):
        if len(args) < 2 or type(args[0]) is not type(args[1]):
            raise NotApplicable("no two inputs of one kind")
        return fn(args[1], args[0], *args[2:], **kwargs)
    return mutant


def _scaled_output(factor):
    def op(fn):
        def mutant(*args, **kwargs):
            return _map(fn(*args, **kwargs),
                        lambda t: t * factor if t.is_floating_point()
                        or (factor == int(factor) and t.dtype != torch.bool) else t,
                        lambda x: x * factor)
        return mutant
    return op


def reciprocal(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs), lambda t: 1 / t if t.is_floating_point() else t,
                    lambda x: 1 / x if x else x)
    return mutant


def negated(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs), lambda t: -t if t.dtype != torch.bool else t,
                    lambda x: -x)
    return mutant


def one_dropped(fn):
    def mutant(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, (list, tuple)) and len(out) > 1:
            return type(out)(out[:-1])
        raise NotApplicable("not a list of results")
    return mutant


def squared(fn):
    def mutant(*args, **kwargs):
        return _map(fn(*args, **kwargs), lambda t: t * t if t.is_floating_point() else t,
                    lambda x: x * x if isinstance(x, float) else x)
    return mutant


def _same(a, b) -> bool:
    """Whether two results are equal (tensors, numbers, lists and tuples of them)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        ta, tb = torch.as_tensor(a), torch.as_tensor(b)
    except (TypeError, ValueError, RuntimeError):
        return a is b or a == b
    if ta.shape != tb.shape:
        return False
    if ta.is_floating_point() or tb.is_floating_point():
        return bool(torch.equal(ta.double().nan_to_num(7.0), tb.double().nan_to_num(7.0)))
    return bool(torch.equal(ta, tb))


def tracked(op, fn):
    """The mutant of ``fn`` by ``op``, which records whether it ever answered otherwise than
    ``fn`` (``mutant.changed``): a mutant that never did is not one for this exercise."""
    inner = op(fn)

    def mutant(*args, **kwargs):
        got = inner(*args, **kwargs)
        if not mutant.changed:
            try:
                mutant.changed = not _same(got, fn(*args, **kwargs))
            except Exception:                   # the right answer fails where the mutant ran
                mutant.changed = True
        return got
    mutant.changed = False
    return mutant


OPERATORS = {
    "in_bfloat16": _half(torch.bfloat16), "in_float16": _half(torch.float16),
    "wrong_axis": wrong_axis, "mask_inverted": mask_inverted, "scale_doubled": scale_doubled,
    "first_call_only": first_call_only, "keywords_ignored": keywords_ignored,
    "last_off_by_one": last_off_by_one, "shifted": shifted, "plus_one": plus_one,
    "last_bound_plus_one": _bound("last", 1), "last_bound_minus_one": _bound("last", -1),
    "first_bound_plus_one": _bound("first", 1), "first_bound_minus_one": _bound("first", -1),
    "args_swapped": args_swapped, "output_doubled": _scaled_output(2),
    "output_halved": _scaled_output(0.5), "reciprocal": reciprocal, "negated": negated,
    "squared": squared, "one_dropped": one_dropped,
}


def run_catalogue(exercise: str, reference, args=(), value: bool = False):
    """``(applied, passed)``: the operators that apply to ``exercise`` (those that change its
    reference answer), and those of them whose mutant passes its check (each one a defect of
    the check). ``value``: the reference is a thunk whose result is the answer itself."""
    import contextlib
    import io

    from attnlab.testing.exercises import check

    applied, passed = [], []
    for name, op in OPERATORS.items():
        if (exercise, name) in EQUIVALENT:
            continue
        mutant = tracked(op, reference)
        with contextlib.redirect_stdout(io.StringIO()):
            if value:
                try:
                    answer = mutant()
                except NotApplicable:
                    continue
                v = check(exercise, answer, *args)
            else:
                v = check(exercise, mutant, *args)
        if "raised NotApplicable" in v.detail or (v.passed and not mutant.changed):
            continue
        applied.append((name, v.detail))
        if v.passed:
            passed.append(name)
    return applied, passed


# operators that change nothing an exercise asks for: its check compares an unordered set
EQUIVALENT = {
    ("11.2", "shifted"): "the answer is a set of pair indices, in any order",
    ("14.3", "shifted"): "the answer is a set of row indices, in any order",
    ("15.1", "last_bound_minus_one"): "a smaller tile holds fewer scores, which the exercise "
                                      "allows",
}
