package filter

import (
	"reflect"
	"testing"
)

// bucketRead.reset assigns its fields one by one (a whole-struct clear
// costs a runtime call in wasm): every field, including any added later,
// must come out as in a new read.
func TestBucketReadResetClearsEveryField(t *testing.T) {
	var r bucketRead
	fillNonZero(t, reflect.ValueOf(&r).Elem())
	if reflect.ValueOf(r).IsZero() {
		t.Fatal("the test did not set any field")
	}
	r.reset(true, 7)
	if want := (bucketRead{stored: true, cas: 7}); r != want {
		t.Fatalf("after reset(true, 7): %+v, want %+v", r, want)
	}
	fillNonZero(t, reflect.ValueOf(&r).Elem())
	r.reset(false, 0)
	if r != (bucketRead{}) {
		t.Fatalf("after reset(false, 0): %+v, want the zero read", r)
	}
}

// fillNonZero sets every field of the struct v (recursively) to a non-zero value.
func fillNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			fillNonZero(t, f)
		case reflect.Bool:
			reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().SetBool(true)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().SetInt(3)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().SetUint(5)
		case reflect.Float32, reflect.Float64:
			reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem().SetFloat(1.5)
		default:
			t.Fatalf("field %s of %s: kind %s not handled by the test", v.Type().Field(i).Name, v.Type(), f.Kind())
		}
	}
}
