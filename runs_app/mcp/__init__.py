"""goaai as an MCP server: the caller's memory and sessions as MCP tools at ``/mcp``.

``tools`` holds what each tool does (plain Django code, run in a worker thread),
``server`` declares the tools to the MCP SDK, and ``app`` is the ASGI application
``goaai.asgi`` mounts: it checks the Host and Origin, authenticates the API token and
hands the request to the SDK's Streamable HTTP transport.
"""
