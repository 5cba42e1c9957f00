"""``{% drop_of product as drop %}``: the drop whose line sells a product page's variant, if any."""

from django import template

from drops.selectors import drop_of_variant

register = template.Library()


@register.simple_tag
def drop_of(variant):
    return drop_of_variant(variant_id=variant.pk)
