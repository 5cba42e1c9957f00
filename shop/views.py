from django.shortcuts import render

from shop.selectors import product_list_for_catalog


def catalog(request):
    return render(request, "shop/catalog.html", {"products": product_list_for_catalog()})
