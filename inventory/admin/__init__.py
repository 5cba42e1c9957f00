"""The inventory's admin: stock, its ledger and reservations (``stock``), and the catalog's admins with their
stock (``catalog``). Importing them registers them."""

from inventory.admin import catalog, stock

__all__ = ["catalog", "stock"]
