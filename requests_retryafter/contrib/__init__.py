"""Integrations with other libraries. Each submodule imports its library only when it is
itself imported, so ``import requests_retryafter`` never needs them:

- :mod:`requests_retryafter.contrib.cachecontrol`: compose with CacheControl's cache.
"""
