"""Curating what agents wrote: the review inbox, its evidence, the reviewer's actions and the store's lint.

``inbox`` reads the agents' unanswered writes from the audit, ``evidence`` weighs each one (duplicates,
conflicts, overrides, authority, use), ``actions`` accepts, rejects, merges and undoes in one write
transaction each, ``lint`` runs the same checks over the whole store, and ``desk.ReviewDesk`` puts them
together for the front ends (``Memory.review``). Each part takes the store roles it uses, never the facade.
"""
