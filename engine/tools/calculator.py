"""A calculator for arithmetic expressions, evaluated over Python's syntax tree: only numbers, + - * / // % **,
unary signs and parentheses are allowed, so model text never reaches `eval` (names, calls, attributes,
subscripts — `__import__('os')` — are refused). Sizes are bounded so that `9**9**9` cannot stall the run."""
from __future__ import annotations

import ast
import math
import operator

from engine.tools.base import Tool, ToolResult

MAX_EXPRESSION_CHARS = 200
MAX_DIGITS = 100          # operands and results: at most this many decimal digits
MAX_EXPONENT = 1000

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    pass


def _check_size(value):
    if isinstance(value, int) and abs(value) >= 10 ** MAX_DIGITS:
        raise CalculatorError(f"number too large (more than {MAX_DIGITS} digits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    return value


def _eval(node: ast.AST):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check_size(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"exponent too large (at most {MAX_EXPONENT})")
            if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                    right * max(len(str(abs(left))) - 1, 0) > MAX_DIGITS:
                raise CalculatorError(f"number too large (more than {MAX_DIGITS} digits)")
        try:
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("number too large") from None
    raise CalculatorError(f"not allowed in an expression: {type(node).__name__}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; CalculatorError says what is wrong."""
    expression = str(expression).strip()
    if not expression:
        raise CalculatorError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    return _eval(tree)


def format_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, int) else f"{value:.12g}"


class CalculatorTool(Tool):
    """config: `timeout` (s). Its one parameter (the schema's first required one, e.g. `expression`)."""

    def execute(self, arguments):
        expression = arguments.get(self.main_parameter, next(iter(arguments.values()), ""))
        try:
            return ToolResult(format_number(evaluate(expression)))
        except CalculatorError as exc:
            return ToolResult(f"error: {exc}", error=str(exc))
