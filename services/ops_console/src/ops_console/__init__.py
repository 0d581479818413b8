"""The ops console: a server-rendered web application (aiohttp + Jinja2) for operators and
finance. It talks to the services through their HTTP APIs only, acting for the operator who logged
in (``backbone.tokens``: the console's token asserts the operator), and audits every act."""
