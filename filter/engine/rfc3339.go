package engine

// instant is a point in time as parsed from RFC 3339: seconds since the
// Unix epoch and nanoseconds within the second.
type instant struct {
	sec  int64
	nsec int64
}

func (a instant) before(b instant) bool {
	return a.sec < b.sec || a.sec == b.sec && a.nsec < b.nsec
}

// parseRFC3339 parses s as time.Parse(time.RFC3339, s) does, and accepts
// and rejects the same strings (FuzzParseRFC3339 checks it):
// YYYY-MM-DDTHH:MM:SS with a one-digit hour allowed, optional fractional
// seconds (digits after '.' or ',', truncated to nanoseconds), then Z or
// ±HH:MM. The engine does
// not import time, which would add about 100 KB to the Wasm module for
// this one validation.
func parseRFC3339(s string) (instant, bool) {
	i := 0
	// num reads between min and max digits at i.
	num := func(min, max int) (int, bool) {
		v, n := 0, 0
		for n < max && i < len(s) && s[i] >= '0' && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
			n++
		}
		return v, n >= min
	}
	lit := func(c byte) bool {
		if i < len(s) && s[i] == c {
			i++
			return true
		}
		return false
	}

	year, ok := num(4, 4)
	ok = ok && lit('-')
	month, ok2 := num(2, 2)
	ok = ok && ok2 && lit('-')
	day, ok2 := num(2, 2)
	ok = ok && ok2 && lit('T')
	hour, ok2 := num(1, 2) // time.Parse's "15" takes one digit too
	ok = ok && ok2 && lit(':')
	minute, ok2 := num(2, 2)
	ok = ok && ok2 && lit(':')
	second, ok2 := num(2, 2)
	if !ok || !ok2 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || second > 59 {
		return instant{}, false
	}
	var nsec int64
	if i+1 < len(s) && (s[i] == '.' || s[i] == ',') && s[i+1] >= '0' && s[i+1] <= '9' {
		i++
		n := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if n < 9 { // time.Parse truncates to nanoseconds
				nsec = nsec*10 + int64(s[i]-'0')
				n++
			}
		}
		for ; n < 9; n++ {
			nsec *= 10
		}
	}
	var offset int
	switch {
	case i == len(s)-1 && s[i] == 'Z':
	case i == len(s)-6 && (s[i] == '+' || s[i] == '-') && s[i+3] == ':':
		sign := s[i]
		i++
		oh, okh := num(2, 2) // time.Parse allows up to +24:60
		i++
		om, okm := num(2, 2)
		if !okh || !okm || oh > 24 || om > 60 {
			return instant{}, false
		}
		offset = (oh*60 + om) * 60
		if sign == '-' {
			offset = -offset
		}
	default:
		return instant{}, false
	}
	sec := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+second-offset)
	return instant{sec: sec, nsec: nsec}, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to the given date of
// the proleptic Gregorian calendar (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
