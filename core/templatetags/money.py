"""The shop's formats for people, in every template (a builtin library): money, moments and days."""

from django import template

from core.moments import day_format, moment_format
from core.money import money_format

register = template.Library()


@register.filter
def money(amount, currency=None):
    """``{{ order.total|money }}``: the amount with the shop's currency (or ``currency``), for the locale."""
    return money_format(amount, currency)


@register.filter
def moment(value):
    """``{{ order.paid_at|moment }}``: ``3 Mar 2026, 09:05 UTC``."""
    return moment_format(value)


@register.filter
def day(value):
    """``{{ shipment.created_at|day }}``: ``3 Mar 2026``."""
    return day_format(value)
