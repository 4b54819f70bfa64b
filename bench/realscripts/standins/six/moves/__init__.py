from types import SimpleNamespace

from requests import prepared_file


def _urlopen(url, *args, **kwargs):
    return open(prepared_file(url), "rb")


urllib = SimpleNamespace(request=SimpleNamespace(urlopen=_urlopen))
