"""Write docs/profile-fields.md from the profile schema itself (deploytool.profiles.schema), so
the field reference cannot drift from the code: every field, its type, its default and its
description. tests/test_docs.py fails when the committed file differs from what this prints."""

from __future__ import annotations

import json
import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from deploytool.profiles.schema import Profile


def _model_of(annotation: object) -> type[BaseModel] | None:
    """The pydantic model a field holds (directly, optional, or as list items), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(annotation))}]"
    if annotation is type(None):
        return "null"
    if annotation is typing.Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default is PydanticUndefined else field.default
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value)}`"


def describe(
    model: type[BaseModel], prefix: str, out: list[str], nested: list[tuple[str, type[BaseModel]]]
) -> None:
    out.append(f"## `{prefix}`\n" if prefix else "## The profile\n")
    if model.__doc__:
        out.append(" ".join(model.__doc__.split()).replace("<", "\\<") + "\n")
    out.append("| field | type | default | meaning |\n| --- | --- | --- | --- |")
    for name, field in model.model_fields.items():
        if field.exclude:  # filled by the loader, never read from YAML
            continue
        path = f"{prefix}.{name}" if prefix else name
        if field.description is None:
            raise SystemExit(f"profile field {path} has no description in the schema")
        sub = _model_of(field.annotation)
        if sub is not None:  # a list of them: `wheels[].file`
            nested.append((path + ("[]" if typing.get_origin(field.annotation) is list else ""), sub))
        # a table cell: no pipe, no line break, and `<name>` shown as written rather than taken for HTML
        meaning = field.description.replace("|", "/").replace("\n", " ").replace("<", "\\<")
        out.append(f"| `{path}` | {_type_name(field.annotation)} | {_default(field)} | {meaning} |")
    out.append("")


def main() -> None:
    out = [
        "# Profile field reference\n",
        "Generated from the schema (src/deploytool/profiles/schema.py) by `make docs` "
        "(scripts/gen_profile_docs.py); tests/test_docs.py keeps it current. "
        "[profiles.md](profiles.md) shows a whole profile and explains weights, secrets and access. Besides these "
        'fields a profile file may name `extends: PARENT` (inherit, then override: profiles.md "`extends`").\n',
    ]
    queue: list[tuple[str, type[BaseModel]]] = [("", Profile)]
    while queue:
        prefix, model = queue.pop(0)
        describe(model, prefix, out, queue)
    one_rule(out)
    print("\n".join(out).rstrip() + "\n")


def one_rule(out: list[str]) -> None:
    """The rule every field that reaches a Dockerfile, a compose file or a command line is held to
    (deploytool.profiles.templated), with each field shape it names."""
    from deploytool.profiles.templated import FREE_FORM, SHAPES

    out += [
        "## What reaches a Dockerfile, a compose file or a command line\n",
        "Checked when a profile loads (`deploytool.profiles.templated`), before anything renders: every text "
        "of a profile, a value or a mapping key at any depth, except under "
        + " and ".join(f"`{s}`" for s in FREE_FORM)
        + " (gates deploytool reads itself), holds no control "
        "character (no line break, tab, NUL or escape; no Unicode line or paragraph separator), and the fields "
        "below, which templates write bare, have their shape. A refusal names the file, the line, the field and "
        "what was expected.\n",
        "| field | expected |",
        "| --- | --- |",
    ]
    for loc, (_, expected) in SHAPES.items():
        field = ".".join(p for p in (loc[:-1] if loc[-1] == "key" else loc))
        what = "each key: " if loc[-1] == "key" else ""
        out.append(f"| `{field}` | {what}{expected.replace('|', '/').replace('<', chr(92) + '<')} |")
    out.append("")


if __name__ == "__main__":
    main()
