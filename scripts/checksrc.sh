#!/usr/bin/env bash
# Ban unsafe C library calls in our sources, as curl's checksrc does: each
# call of a banned function is reported with a bounded or checked form to use
# instead.  Exits 1 if any is found, 2 if a file cannot be read.
#   scripts/checksrc.sh            check the files scripts/c-sources.sh lists
#   scripts/checksrc.sh FILE...    check these files
# A call is the name as a whole word followed by `(`, outside comments,
# string and character literals; `x.name(` and `p->name(` are not calls of
# the library function.
set -euo pipefail

files=()
if [ $# -gt 0 ]; then
  files=("$@")
else
  cd "$(dirname "$0")/.."
  while IFS= read -r -d '' f; do
    files+=("$f")
  done < <(scripts/c-sources.sh -z)
fi
[ ${#files[@]} -eq 0 ] && exit 0

exec perl - "${files[@]}" <<'PERL'
use strict;
use warnings;

my %banned = (
    strcpy   => "snprintf(dst, size, \"%s\", src), or memcpy with a checked length",
    stpcpy   => "memcpy with a checked length",
    strncpy  => "snprintf(dst, size, \"%s\", src), or memcpy with a checked length; strncpy may leave no NUL",
    strcat   => "snprintf into the rest of the buffer, or a pl__buf",
    strncat  => "snprintf into the rest of the buffer, or a pl__buf",
    sprintf  => "snprintf",
    vsprintf => "vsnprintf",
    gets     => "fgets",
    strtok   => "strtok_r, or strchr/strcspn",
    atoi     => "strtol, checking errno, the end pointer and the range",
    atol     => "strtol, checking errno and the end pointer",
    atoll    => "strtoll, checking errno and the end pointer",
    atof     => "strtod, checking errno and the end pointer",
    tmpnam   => "mkstemp or mkdtemp",
    tempnam  => "mkstemp or mkdtemp",
    mktemp   => "mkstemp or mkdtemp",
    getwd    => "getcwd",
    alloca   => "malloc, or a fixed-size array with a checked bound",
);
my $names = join "|", sort keys %banned;
my $call = qr/(?<![\w.])(?<!->)($names)\s*\(/;

# Blank out comments, string and character literals, keeping every newline
# so that line numbers stay right.
sub code_only {
    my ($s) = @_;
    $s =~ s{
        ( /\*.*?\*/ | //(?:[^\\\n]|\\.)* | "(?:[^"\\\n]|\\.)*" | '(?:[^'\\\n]|\\.)*' )
    }{ my $m = $1; $m =~ s/[^\n]/ /g; $m }gsex;
    return $s;
}

my ($found, $status) = (0, 0);
for my $file (@ARGV) {
    my $fh;
    unless (open $fh, "<", $file) {
        print STDERR "checksrc: $file: $!\n";
        $status = 2;
        next;
    }
    my $text = do { local $/; <$fh> };
    close $fh;
    my $line = 0;
    for my $code (split /\n/, code_only($text), -1) {
        $line++;
        while ($code =~ /$call/g) {
            print "$file:$line: banned call $1 (use $banned{$1})\n";
            $found++;
        }
    }
}
print STDERR "checksrc: $found banned call(s)\n" if $found;
exit($status ? $status : $found ? 1 : 0);
PERL
