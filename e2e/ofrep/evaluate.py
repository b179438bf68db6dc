"""Evaluate flags through OpenFeature's OFREP provider for Python.

openfeature-provider-ofrep with openfeature-sdk; prints one JSON line per
flag: {"flag", "value", "variant", "reason", "errorCode"}, as evaluate.mjs
does.

    python evaluate.py BASE_URL CONTEXT_JSON FLAG[:TYPE]...

BASE_URL is where OFREP is served (the provider appends
/ofrep/v1/evaluate/flags/{key}); CONTEXT_JSON is the evaluation context,
e.g. {"targetingKey": "user-1", "country": "NL"}; TYPE is string (the
default), boolean, integer, float or object. It exits 2 on bad arguments.
"""

import json
import sys

from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext

# Each type's getter and the default value it is given.
GETTERS = {
    "string": lambda c, key, ctx: c.get_string_details(key, "", ctx),
    "boolean": lambda c, key, ctx: c.get_boolean_details(key, False, ctx),
    "integer": lambda c, key, ctx: c.get_integer_details(key, 0, ctx),
    "float": lambda c, key, ctx: c.get_float_details(key, 0.0, ctx),
    "object": lambda c, key, ctx: c.get_object_details(key, {}, ctx),
}


def main(argv):
    if len(argv) < 3:
        print("usage: python evaluate.py BASE_URL CONTEXT_JSON FLAG[:TYPE]...", file=sys.stderr)
        return 2
    base_url, context_json, flags = argv[0], argv[1], argv[2:]
    attributes = json.loads(context_json)
    targeting_key = attributes.pop("targetingKey", None)
    context = EvaluationContext(targeting_key, attributes)

    api.set_provider(OFREPProvider(base_url))
    client = api.get_client()
    for flag in flags:
        key, _, kind = flag.partition(":")
        get = GETTERS.get(kind or "string")
        if get is None:
            print(f"flag {flag}: type {kind}, want one of {', '.join(GETTERS)}", file=sys.stderr)
            return 2
        d = get(client, key, context)
        print(json.dumps({
            "flag": key,
            "value": d.value,
            "variant": d.variant,
            "reason": d.reason,
            "errorCode": d.error_code.value if d.error_code else None,
        }), flush=True)
    api.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
