"""Vouchers: discount codes whose limited uses are held like stock, reserved with an order and given back."""
