import json
import inmanta.util
from inmanta.plugins import plugin


@plugin
def dumps(obj: "any") -> "string":
    return json.dumps(obj, default=inmanta.util.internal_json_encoder, sort_keys=True)
