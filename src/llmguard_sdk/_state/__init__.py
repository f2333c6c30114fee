"""Private: the stores, the key scheme, and the steps and batches every backend is made of.

:mod:`llmguard_sdk.store` re-exports the store classes users name.
"""
