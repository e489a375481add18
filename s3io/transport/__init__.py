"""Transport: aiohttp's pooled connector and parser, sockets with TCP_USER_TIMEOUT and keepalive, SigV4, addressing."""
