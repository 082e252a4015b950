"""The REST API reference, rendered from the service's OpenAPI document.

The document is the one the service serves at `/openapi.json`
(`fairmatch.main.create_app().openapi()`), built here from the default
settings; the rendering is offline: operations by tag, then every schema.
"""

from __future__ import annotations

import json
from typing import Any

from markdown_text import cell, escape

from fairmatch.main import create_app
from fairmatch.settings import GivenSettings

METHODS = ("get", "put", "post", "patch", "delete")
REF_PREFIX = "#/components/schemas/"


def openapi_document() -> dict[str, Any]:
    return create_app(GivenSettings()).openapi()  # the defaults: the machine's settings stay out


def schema_anchor(name: str) -> str:
    return "schema-" + name.lower()


def type_of(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, with links to named schemas."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF_PREFIX)
        return f"[{name}](#{schema_anchor(name)})"
    for combiner in ("anyOf", "oneOf", "allOf"):
        if combiner in schema:
            return " or ".join(dict.fromkeys(type_of(option) for option in schema[combiner]))
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        return "array of " + type_of(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "object of " + type_of(schema["additionalProperties"])
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or "any JSON"


def bounds_of(schema: dict[str, Any]) -> str:
    """The bounds of a schema and of the options it combines, e.g. `1 ≤ length ≤ 255`."""
    names = {
        "minimum": "≥ {}",
        "exclusiveMinimum": "> {}",
        "maximum": "≤ {}",
        "exclusiveMaximum": "< {}",
        "minLength": "length ≥ {}",
        "maxLength": "length ≤ {}",
        "minItems": "items ≥ {}",
        "maxItems": "items ≤ {}",
        "pattern": "matches `{}`",
    }
    found: list[str] = []
    options = [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]
    for option in options:
        for key, text in names.items():
            if key in option:
                value = option[key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                found.append(text.format(value))
    return ", ".join(dict.fromkeys(found))


def content_cell(content: dict[str, Any]) -> str:
    parts = []
    for media_type, body in content.items():
        parts.append(f"`{media_type}`: {type_of(body.get('schema', {}))}")
    return "<br>".join(parts)


def operation_markdown(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if summary := operation.get("summary"):
        out += [f"**{summary}.**" if not summary.endswith(".") else f"**{summary}**", ""]
    if description := operation.get("description"):
        out += [escape(description.strip()), ""]
    if parameters := operation.get("parameters"):
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            kind = type_of(schema)
            if bounds := bounds_of(schema):
                kind += f" ({bounds})"
            if "default" in schema:
                kind += f", default `{json.dumps(schema['default'])}`"
            out.append(
                f"| `{parameter['name']}` | {parameter['in']} | {cell(kind)} | "
                f"{'yes' if parameter.get('required') else 'no'} | {cell(parameter.get('description', ''))} |"
            )
        out.append("")
    if body := operation.get("requestBody"):
        required = "required" if body.get("required") else "optional"
        out += [f"Request body ({required}): {content_cell(body.get('content', {}))}", ""]
    out += ["| status | description | body |", "|---|---|---|"]
    for status, response in operation.get("responses", {}).items():
        out.append(
            f"| {status} | {cell(response.get('description', ''))} | {content_cell(response.get('content', {}))} |"
        )
    out.append("")
    return out


def schema_markdown(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name} {{#{schema_anchor(name)}}}", ""]
    if description := schema.get("description"):
        out += [escape(description.strip()), ""]
    properties = schema.get("properties")
    if not properties:
        out += [f"Type: {type_of({k: v for k, v in schema.items() if k != 'description'})}.", ""]
        return out
    required = set(schema.get("required", []))
    out += ["| field | type | required | description |", "|---|---|---|---|"]
    for field, field_schema in properties.items():
        kind = type_of(field_schema)
        if bounds := bounds_of(field_schema):
            kind += f" ({bounds})"
        if "default" in field_schema:
            kind += f", default `{json.dumps(field_schema['default'])}`"
        out.append(
            f"| `{field}` | {cell(kind)} | {'yes' if field in required else 'no'} | "
            f"{cell(field_schema.get('description', ''))} |"
        )
    if schema.get("additionalProperties") is True:
        out.append("| (any other) | any JSON | no | |")
    out.append("")
    return out


def markdown(document: dict[str, Any] | None = None) -> str:
    document = document or openapi_document()
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in document["paths"].items():
        for method in METHODS:
            if operation := item.get(method):
                tag = (operation.get("tags") or ["service"])[0]
                by_tag.setdefault(tag, []).append((path, method, operation))
    info = document["info"]
    out = [f"OpenAPI {document['openapi']}, {info['title']} {info['version']}.", ""]
    for tag, operations in by_tag.items():
        out += [f"## {tag.capitalize()}", ""]
        for path, method, operation in operations:
            out += operation_markdown(path, method, operation)
    out += ["## Schemas", ""]
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        out += schema_markdown(name, schema)
    return "\n".join(out)
