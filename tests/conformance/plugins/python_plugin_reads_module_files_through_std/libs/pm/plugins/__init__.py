from inmanta.plugins import Context, plugin
from inmanta_plugins.std import get_file_content


@plugin
def read(ctx: Context, module_dir: "string", path: "string") -> "string":
    return get_file_content(ctx, module_dir, path).strip()
