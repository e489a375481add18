"""Transport: sockets with TCP_USER_TIMEOUT and keepalive, the aiohttp session, SigV4, credentials, addressing."""
