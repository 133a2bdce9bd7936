"""A multi grader's ``calculate_output``, parsed with :mod:`ast` and evaluated by walking the
tree: never ``eval``.

OpenAI documents the formula as arithmetic over the sub-graders' names with ``+ - * / ^``
(``**`` accepted too), parentheses, numbers and the functions ``min``, ``max``, ``abs``,
``floor``, ``ceil``, ``exp``, ``sqrt`` and ``log`` (platform.openai.com/docs/guides/graders,
"Multigraders"). Anything else (attributes, subscripts, comparisons, calls of other names,
strings) is a parse error naming what was found.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "sqrt": math.sqrt,
    "log": math.log,
}
"""The functions a formula may call."""

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.BitXor: operator.pow,  # OpenAI writes powers ``a ^ b``
}
_UNARY: dict[type, Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_FORMULA_CHARS = 2000
"""The longest formula accepted (a guard on the parser's work, not an OpenAI rule)."""


class FormulaError(ValueError):
    """The formula cannot be parsed, names an unknown variable, or fails to evaluate.

    Attributes:
        kind: ``parse`` (OpenAI's ``formula_parse_error``), ``variable``
            (``invalid_variable_error``) or ``evaluate`` (a math error such as a division by
            zero: ``other_error``).
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_formula(text: str, names: set[str] | frozenset[str]) -> ast.Expression:
    """Parse ``text`` and check it uses only arithmetic, the allowed functions and ``names``.

    Raises:
        FormulaError: ``parse`` for a syntax error or a construct outside the grammar,
            ``variable`` for a name that is neither a sub-grader nor a function.
    """
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("calculate_output is empty; give a formula such as 'a + b'.", "parse")
    if len(text) > MAX_FORMULA_CHARS:
        raise FormulaError(f"calculate_output is over {MAX_FORMULA_CHARS} characters.", "parse")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(
            f"calculate_output {text!r} does not parse: {exc.msg} at column {exc.offset}.", "parse"
        ) from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in names and node.id not in FUNCTIONS:
                known = ", ".join(sorted(names)) or "none"
                raise FormulaError(
                    f"calculate_output names {node.id!r}, which is not one of the graders "
                    f"({known}) nor a function ({', '.join(FUNCTIONS)}).",
                    "variable",
                )
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise FormulaError(
                    f"calculate_output calls {ast.unparse(node.func)!r}; the functions are "
                    f"{', '.join(FUNCTIONS)}.",
                    "parse",
                )
            if node.keywords:
                raise FormulaError(
                    "calculate_output: functions take no keyword arguments.", "parse"
                )
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise FormulaError(
                    f"calculate_output holds {node.value!r}; only numbers are allowed.", "parse"
                )
        elif (
            not isinstance(
                node,
                ast.Expression | ast.BinOp | ast.UnaryOp | ast.Load | ast.operator | ast.unaryop,
            )
            or (isinstance(node, ast.operator) and type(node) not in _BINARY)
            or (isinstance(node, ast.unaryop) and type(node) not in _UNARY)
        ):
            raise FormulaError(
                f"calculate_output holds {type(node).__name__}, which is not arithmetic "
                "(+ - * / ^, parentheses, numbers, grader names and the listed functions).",
                "parse",
            )
    return tree


def evaluate_formula(text: str, values: Mapping[str, float]) -> float:
    """The formula's value with each sub-grader name bound to its score.

    Raises:
        FormulaError: as :func:`parse_formula`, or ``evaluate`` when the arithmetic fails
            (division by zero, ``log`` of 0, overflow) or the result is not finite.
    """
    tree = parse_formula(text, frozenset(values))

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return float(values[node.id])
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](walk(node.operand))
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        return float(FUNCTIONS[node.func.id](*(walk(a) for a in node.args)))

    try:
        out = walk(tree)
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise FormulaError(f"calculate_output {text!r} fails: {exc}.", "evaluate") from None
    if not math.isfinite(out):
        raise FormulaError(
            f"calculate_output {text!r} gives {out}, not a finite number.", "evaluate"
        )
    return out
