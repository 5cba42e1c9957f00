"""Where product images are served from, for the Content-Security-Policy's ``img-src``.

Local files are served by the shop itself (``'self'``) unless ``MEDIA_URL`` is absolute (a CDN in front
of it). An S3-compatible store serves them from its own host, which boto3 names as django-storages asks
it: the ``custom_domain`` if set; else the endpoint, addressed by path (``https://s3.example.net/bucket/``)
or by a bucket host (``https://bucket.s3.example.net/``); on AWS the bucket's global or regional host.
"""

import ipaddress
from urllib.parse import urlsplit


def media_origins(*, media_url: str, storage: dict) -> list[str]:
    """The origins other than the shop's own that its pages load images from, in a stable order."""
    origins = [_origin(media_url)] if urlsplit(media_url).netloc else []
    options = storage.get("OPTIONS", {})
    if storage["BACKEND"] == "storages.backends.s3.S3Storage":
        bucket, endpoint, domain = options["bucket_name"], options.get("endpoint_url"), options.get("custom_domain")
        if domain:
            origins.append(_origin(f"https://{domain}"))
        elif endpoint:
            origins.append(_origin(endpoint))
            if not _is_address(urlsplit(endpoint).hostname):
                parts = urlsplit(endpoint)
                origins.append(f"{parts.scheme}://{bucket}.{parts.netloc}")
        else:
            origins.append(f"https://{bucket}.s3.amazonaws.com")
            if options.get("region_name"):
                origins.append(f"https://{bucket}.s3.{options['region_name']}.amazonaws.com")
    return list(dict.fromkeys(origins))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _is_address(host: str | None) -> bool:
    """Whether ``host`` is an IP address, which boto3 addresses by path only (no bucket host)."""
    try:
        ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return True
