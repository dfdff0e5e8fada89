"""Answers from memory: an OpenAI-compatible chat model given the budgeted context, citing entry ids.

``llm`` streams chat completions over httpx; ``prompt`` assembles what the
model reads (the same markdown ``memlens context`` prints, plus web text in a
section marked untrusted); ``citations`` parses the ids an answer cites and
checks them against the ids that were sent; ``ask`` runs the whole question;
``log`` records every answer with the retrieval it used.
"""
