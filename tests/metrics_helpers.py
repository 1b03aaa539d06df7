"""Reading /metrics in tests: a scrape's samples by (name, labels)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset]


class Samples(Mapping[Key, float]):
    """A scrape's samples by (name, labels), parsed a name at a time as a
    test looks one up: a scrape late in the suite holds every earlier test's
    series (tens of thousands), and parsing all of them for the one a test
    reads cost a second a scrape. Iterating parses the whole text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.by_name: dict[str, dict[frozenset, float]] = {}

    def of(self, name: str) -> dict[frozenset, float]:
        if name not in self.by_name:
            lines = [line for line in self.text.splitlines() if line.startswith((f"{name}{{", f"{name} "))]
            self.by_name[name] = {
                labels: value for (sample, labels), value in _parsed("\n".join(lines) + "\n").items() if sample == name
            }
        return self.by_name[name]

    def __getitem__(self, key: Key) -> float:
        name, labels = key
        return self.of(name)[labels]

    def __iter__(self) -> Iterator[Key]:
        return iter(_parsed(self.text))

    def __len__(self) -> int:
        return len(_parsed(self.text))


def _parsed(text: str) -> dict[Key, float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(api) -> Samples:
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return Samples(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)
