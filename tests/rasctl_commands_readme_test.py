#!/usr/bin/env python3
"""README's rasctl table against rasctl's own command table.

Every command `rasctl __commands` lists (but help and version, which need
no daemon and no row) has a row in README's "| command | what it does |
who may |" table; a command rasd admits only from administrators says so
in the row's last column, one anyone may run does not; and the table names
no command rasctl lacks.
Usage: rasctl_commands_readme_test.py RASCTL README
"""
import re
import subprocess
import sys


def readme_rows(path):
    rows = {}
    inside = False
    with open(path, encoding="utf-8") as readme:
        for line in readme:
            if line.startswith("| command | what it does | who may |"):
                inside = True
                continue
            if inside and not line.startswith("|"):
                break
            if not inside or line.startswith("|---"):
                continue
            match = re.match(r"\| `([a-z-]+)", line)
            if not match:
                continue
            who = line.rstrip().rstrip("|").rsplit("|", 1)[-1].strip()
            rows[match.group(1)] = who
    return rows


def main():
    rasctl, readme = sys.argv[1], sys.argv[2]
    listed = subprocess.run([rasctl, "__commands"], capture_output=True, text=True, check=True)
    commands = {}
    for line in listed.stdout.splitlines():
        name, who, _ = line.split("\t", 2)
        commands[name] = who
    rows = readme_rows(readme)
    problems = []
    if len(rows) < 10:
        problems.append(f"README's command table has {len(rows)} rows; not found?")
    for name, who in commands.items():
        if name in ("help", "version"):
            continue
        if name not in rows:
            problems.append(f"README has no row for rasctl {name}")
            continue
        says_anyone = rows[name].startswith("anyone")
        if who == "admin" and says_anyone:
            problems.append(f"rasctl {name} is for administrators, README says '{rows[name]}'")
        if who == "anyone" and not says_anyone:
            problems.append(f"anyone may run rasctl {name}, README says '{rows[name]}'")
    for name in rows:
        if name not in commands:
            problems.append(f"README lists rasctl {name}, which rasctl does not have")
    for problem in problems:
        print(problem)
    if problems:
        sys.exit(1)
    print(f"README lists all {len(commands) - 2} rasctl commands")


if __name__ == "__main__":
    main()
