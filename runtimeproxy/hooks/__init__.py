"""The hook core: what runs plugins on the lifecycle calls, for every frontend and plugin kind; knows no transport.

  lifecycle             the flow of each hook point, one short function per point (the frontends call these)
  kinds, step           the table of plugin kinds (hook, NRI) and the one chain step both use: toggle, shadow,
                        timing, statistics, validation's refusal, trace, the failure and ownership rules
  dispatcher, chain     calling a hook point's plugins in order; what one kubelet call's chain did, both plugin
                        kinds' steps in one record (changes, collisions across kinds, shadows)
  nri_plugins           the interface to NRI plugins, the core's other plugin kind
  nri_events            NRI's event table (name, wire number, messages, rules), every list about NRI events
  names, config, registry, plugin, dirwatch, trusted_files
                        hook plugins' registration files: parsed, trusted, watched, their channels
  merge, validate, changes, edits, envvalues
                        folding an answer into the request, checking it is safe, describing what changed
  model, hook_messages, chain_value, store, context, rebuild, runtime
                        the core's model of a pod and a container (plain values, no protocol's message; every
                        plugin protocol's message is made from it: koordinator's in hook_messages), what a
                        call's chain carries (chain_value: the model with its hook projection), the bounded store of
                        them, their lookups and rebuild, and the `Runtime` each frontend implements (with
                        `PluginAsks`, the one door to the store for NRI)
  journal, reconcile    the write-ahead journal of hooked calls in flight, and what a restart finishes of the
                        calls a crash cut off (one rule, after the rebuild)
  missed                pods and containers created without a plugin that failed under Ignore
  service, syncgate     the core wired together; the gate between lifecycle calls and plugin synchronization
  toggles, toggle_state, toggle_words
                        the node's toggles in force, what they persist, and the words a person types and reads
  trace, stats, skip    the per-pod decision trace, call statistics, the skip label
"""
