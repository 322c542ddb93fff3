"""Reading and filling in the dashboards' PromQL: the metric names and label matchers a query uses (so tests
can hold them to the catalogue), and Grafana's substitution of template variables and `$__rate_interval`.

Not a PromQL parser: enough for the queries fgpu writes (selectors, aggregations with by/without, functions,
binary operators, numbers and strings)."""
from __future__ import annotations

import re

FUNCTION_OR_KEYWORD = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*(?=\s*\()")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w$:.])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "Inf", "NaN"}
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = _GROUPING.sub(" ", text)
    text = FUNCTION_OR_KEYWORD.sub(" ", text)  # function and aggregation names (followed by "(")
    return {m for m in _IDENT.findall(text) if m not in _KEYWORDS}


def matchers(expr: str) -> list[tuple[str, str, str, str]]:
    """(metric, label, operator, value) for every label matcher written on a named selector."""
    out = []
    for metric, body in _SELECTOR.findall(expr):
        pos = 0
        while pos < len(body.strip()):
            m = _MATCHER.match(body, pos)
            if m is None:
                raise ValueError(f"cannot read the label matchers {{{body}}} of {metric} in {expr!r}")
            out.append((metric, m.group(1), m.group(2), m.group(3)))
            pos = m.end()
    return out


def variables(text: str) -> set[str]:
    """Template variables a query or variable query refers to ($name or ${name}), built-ins included."""
    return {a or b for a, b in _VARIABLE.findall(text)}


def rate_interval(step_s: float, scrape_interval_s: float) -> str:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval), in seconds."""
    return f"{int(max(step_s + scrape_interval_s, 4 * scrape_interval_s) + 0.999)}s"


def substitute(expr: str, values: dict[str, str], rate: str = "1m") -> str:
    """`expr` with every template variable replaced by its regex text in `values` (such as the allValue
    `.*`) and $__rate_interval by `rate`; a variable missing from `values` is an
    error."""
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name == "__rate_interval":
            return rate
        if name not in values:
            raise KeyError(f"no value for template variable ${name} in {expr!r}")
        return values[name]
    return _VARIABLE.sub(one, expr)


def groupings(expr: str) -> list[set[str]]:
    """The label lists of every by/without/on/ignoring/group_left/group_right clause."""
    return [{label.strip() for label in m.group(2).split(",") if label.strip()}
            for m in _GROUPING.finditer(_STRING.sub('""', expr))]


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$")


def label_values_query(query: str) -> tuple[str, str]:
    """(series selector, label) of a `label_values(selector, label)` variable query."""
    m = _LABEL_VALUES.match(query)
    if m is None:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return m.group(1), m.group(2)
