"""The plugin author's kit: write a runtime hook plugin by returning only what you change.

    from runtimeproxy.plugin import HookPlugin, main
    from runtimeproxy.pb.hooks.runtime.v1alpha1 import api_pb2 as hooks

    class MyPlugin(HookPlugin):
        def pre_create_container(self, request):
            return hooks.ContainerResourceHookResponse(container_envs={"MY_VAR": "x"})

    raise SystemExit(main(MyPlugin()))

The kit builds the koordlet-style answer (the request echoed back with your changes laid over it,
plugin.answers), serves it on a unix socket (plugin.service), writes or prints the registration JSON
(plugin.registration, plugin.command). `runtimeproxyctl try-plugin` calls a running plugin with sample
requests and shows what the proxy would make of its answers (plugin.trying), with kubelet-shaped sample requests (plugin.samples).
"""

from runtimeproxy.plugin.answers import Whole, answer, echoed
from runtimeproxy.plugin.command import main, serve_until_stopped
from runtimeproxy.plugin.registration import registration, write_registration
from runtimeproxy.plugin.service import HOOKS, HookError, HookPlugin

__all__ = ["HOOKS", "HookError", "HookPlugin", "Whole", "answer", "echoed", "main", "registration",
           "serve_until_stopped", "write_registration"]
