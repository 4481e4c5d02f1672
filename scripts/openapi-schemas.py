#!/usr/bin/env python3
"""Copy the record schemas (record/schema/*.json) into the OpenAPI document.

OpenAPI validators resolve a $ref by fetching it, and the $id of a record
schema (https://github.com/agentd/agentd/record/schema/<kind>.json) names the
schema, it is not a place to fetch it from. So the document carries its own
copy of each under components/schemas, and refers to them there:

  agent.json    -> AgentObject (its definitions: Agent<Name>)
  announce.json -> Announce      query.json -> Query
  response.json -> Response

draft-07's "definitions" become components, its array-valued
"dependencies" 2020-12's "dependentRequired"; "$schema" and "$id" are
dropped.
api/openapi_test.go (TestOpenAPIRecordSchemas) derives the same components
from the embedded schemas and fails when the document differs: run this
script after editing a record schema. It rewrites api/openapi.json and its
copy docs/openapi.json.
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = "https://github.com/agentd/agentd/record/schema/"
NAMES = {"agent": "AgentObject", "announce": "Announce", "query": "Query", "response": "Response"}


def rewrite(node, kind, defs):
    """Rewrite every $ref of a record schema to a components/schemas ref."""
    if isinstance(node, list):
        return [rewrite(x, kind, defs) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "$ref" and isinstance(v, str):
            out[k] = target(v, kind, defs)
        elif k == "dependencies" and all(isinstance(x, list) for x in v.values()):
            out["dependentRequired"] = v
        else:
            out[k] = rewrite(v, kind, defs)
    return out


def target(ref, kind, defs):
    if ref.startswith(BASE):
        ref = ref[len(BASE):]
    if ref.startswith("#/definitions/"):
        name = ref[len("#/definitions/"):]
        # announce.json and response.json alias agent.json through
        # definitions Agent -> AgentObject -> agent.json.
        if name in defs.get(kind, {}) and kind != "agent":
            return target(defs[kind][name].get("$ref", ""), kind, defs)
        return "#/components/schemas/Agent" + name
    if ref.endswith(".json"):
        return "#/components/schemas/" + NAMES[ref[:-5]]
    raise SystemExit("unexpected $ref %r in %s.json" % (ref, kind))


def components():
    schemas, defs = {}, {}
    for kind in NAMES:
        schemas[kind] = json.loads((ROOT / "record/schema" / (kind + ".json")).read_text())
        defs[kind] = schemas[kind].get("definitions", {})
    out = {}
    for kind, name in NAMES.items():
        s = {k: v for k, v in schemas[kind].items() if k not in ("$schema", "$id", "definitions")}
        out[name] = rewrite(s, kind, defs)
    for name, d in defs["agent"].items():
        out["Agent" + name] = rewrite(d, "agent", defs)
    return out


def main():
    doc = json.loads((ROOT / "api/openapi.json").read_text())
    schemas = doc["components"]["schemas"]
    schemas.pop("UnsignedAgentObject", None)
    for name, s in components().items():
        schemas[name] = s
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    for p in ("api/openapi.json", "docs/openapi.json"):
        (ROOT / p).write_text(text)


if __name__ == "__main__":
    main()
