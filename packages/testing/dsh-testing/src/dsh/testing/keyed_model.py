"""A scripted model whose script depends on the prompt (plugin ``dsh-testing-keyed-model``).

The core ``scripted`` adapter picks replies by step only, so one process can
only follow one script. Tests that drive a separate dsh process (``dsh acp``)
with several prompts need the reply to depend on the prompt: the first rule
whose ``contains`` occurs in the turn's user message supplies the replies
(chosen by step, like ``scripted``), else ``default`` does::

    [[plugin]]
    name = "dsh-testing-keyed-model"

    [agent.model]
    adapter = "keyed"
    [[agent.model.options.rules]]
    contains = "hang"
    replies = [{ hang = true }]
    [[agent.model.options.rules]]
    contains = "fail"
    replies = [{ error = "the scripted model fails on purpose" }]
    [[agent.model.options.default]]
    text = "Done: {prompt}"
"""

from dsh.testing._keyed_model import KeyedModelOptions, KeyedRule, keyed_factory, plugin

__all__ = ["KeyedModelOptions", "KeyedRule", "keyed_factory", "plugin"]
