"""goaai's agents behind an OpenAI-compatible API, at ``/v1/``.

Any OpenAI SDK or chat front-end talks to goaai's agents (``model`` is the agent's
id) while goaai records every exchange as a run: ``GET /v1/models``, ``POST
/v1/chat/completions``, ``POST /v1/responses`` and ``GET /v1/responses/{id}``, in
the shapes OpenAI's own API has (its errors too). The contract is OpenAI's, so
these routes are not part of goaai's own OpenAPI schema.
"""
