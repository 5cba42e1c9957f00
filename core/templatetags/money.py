from django import template

from core.money import money_format

register = template.Library()


@register.filter
def money(amount, currency=None):
    """``{{ order.total|money }}``: the amount with the shop's currency (or ``currency``), for the locale."""
    return money_format(amount, currency)
